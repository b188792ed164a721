"""Ops that make tensors (full / zeros / ones and their _like forms, arange) and dtype conversions,
including a one-element tensor's conversion to a Python number (`.item()`).

Fills are ConstantOfShape over a shape that may be symbolic; an arange of static bounds is an
initializer (export usually constant-folds those), a symbolic one a Range.
"""

from __future__ import annotations

import sympy
import torch

from trainrt.capture.context import OpContext
from trainrt.capture.onnx_builder import fill_value
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _fill(ctx: OpContext, value) -> str:
    """A tensor of the output's (possibly symbolic) shape and dtype filled with value."""
    shape = ctx.ints(ctx.out.shape)
    return ctx.emit("ConstantOfShape", [shape], value=fill_value(value, ctx.out_dtype))


@translates("aten.full.default", "aten.full_like.default", "aten.new_full.default")
def full(ctx: OpContext) -> str:
    return _fill(ctx, ctx["fill_value"])


@translates("aten.fill.Scalar")
def fill_scalar(ctx: OpContext) -> str:
    """The functional form of `x.fill_(value)` (and of `x[..., i] = value` after select)."""
    return _fill(ctx, ctx["value"])


@translates("aten.fill.Tensor")
def fill_tensor(ctx: OpContext) -> str:
    """x.fill_(value) with a 0-d tensor value: value in x's dtype, expanded to x's shape."""
    value = ctx.cast(ctx.tensor("value"), ctx.out_dtype)
    return ctx.emit("Expand", [value, ctx.ints(ctx.out.shape)])


@translates("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default",
            "aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty.default")
def zeros(ctx: OpContext) -> str:
    """Zeros; torch.empty's contents are unspecified, so zeros are a valid (deterministic) choice."""
    return _fill(ctx, 0)


@translates("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default")
def ones(ctx: OpContext) -> str:
    return _fill(ctx, 1)


@translates("aten.scalar_tensor.default")
def scalar_tensor(ctx: OpContext) -> str:
    return ctx.operand(ctx["s"], ctx.out_dtype)


@translates("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def arange(ctx: OpContext) -> str:
    """torch.arange: an initializer when the bounds are static, else Range in the output dtype."""
    start, end, step = ctx.args.get("start", 0), ctx["end"], ctx.args.get("step", 1)
    t = ctx.out_dtype
    if all(is_static(v) for v in (start, end, step)):
        values = torch.arange(_number(start), _number(end), _number(step), dtype=t)
        return ctx.b.add_initializer(values, f"{ctx.node.name}/arange")
    return ctx.emit("Range", [ctx.operand(v, t) for v in (start, end, step)])


@translates("aten.eye.default", "aten.eye.m")
def eye(ctx: OpContext) -> str:
    """torch.eye(n, m): an initializer for static sizes, else Equal of a column and a row Range."""
    n = ctx["n"]
    m = ctx.args.get("m", n)
    t = ctx.out_dtype
    if is_static(n) and is_static(m):
        return ctx.b.add_initializer(torch.eye(int(n), int(m), dtype=t), f"{ctx.node.name}/eye")
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    rows = ctx.emit("Range", [zero, ctx.operand(n, torch.int64), one])
    cols = ctx.emit("Range", [zero, ctx.operand(m, torch.int64), one])
    hit = ctx.emit("Equal", [ctx.emit("Unsqueeze", [rows, ctx.ints([1])]), cols])
    return ctx.cast_to(hit, torch.bool, t)


def _number(v):
    return v if isinstance(v, (int, float)) else int(v)


@translates("aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten._to_copy.default",
            "aten.type_as.default")
def to_dtype(ctx: OpContext) -> str:
    """Cast to the output dtype; device and layout moves are no-ops in the engine's graph."""
    return ctx.cast(ctx.tensor("self"), ctx.out_dtype)


@translates("aten.copy.default")
def copy(ctx: OpContext) -> str:
    """The functional form of `self.copy_(src)`: src broadcast to self's shape, in self's dtype."""
    src = ctx.tensor("src")
    y = ctx.cast(src, ctx.out_dtype)
    if src.shape == tuple(ctx.out.shape):
        return y
    return ctx.emit("Expand", [y, ctx.ints(ctx.out.shape)])


@translates("aten.item.default", "aten._local_scalar_dense.default")
def item(ctx: OpContext):
    """x.item() (and each element of x.tolist()) of an integer tensor: export gives it an unbacked
    symbol u<k> that later ops use as a size (JetMoE's `inputs.split(expert_size)`, the per-expert
    token counts). The symbol is bound to x as a [1]-shaped int64 tensor, so its sizes are computed
    when the step runs (the engine infers such shapes at run time, as NonZero's); the node's value
    stays the SymInt, which symbolic.py lowers where an op reads it. A bool item is export's
    `Eq(u<k>, 1)` over an int symbol: u<k> is bound to x as 0 / 1, read by the branch checks of a
    capture specialized on it (branch_checks.py). A float item has no size to stand for (a value
    read only by asserts never reaches here: translator._CheckedOnly)."""
    x, value = ctx.tensor("self"), ctx.node.meta["val"]
    if x.dtype == torch.bool and isinstance(value, torch.SymBool):
        expr = value.node._expr  # as traced: `expr` reads True once the branch check decided u<k> := 1
        if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol) and expr.rhs == 1:
            ctx.symbols.add_value(expr.lhs, ctx.emit("Reshape", [ctx.cast(x, torch.int64), ctx.ints([1])]))
            return value
    if not isinstance(value, (int, torch.SymInt)) or x.dtype.is_floating_point or x.dtype == torch.bool:
        raise ctx.unsupported(f"of a {x.dtype} tensor has no TrainRT translation (integer tensors only)")
    if not is_static(value):
        ctx.symbols.add_value(value, ctx.emit("Reshape", [ctx.cast(x, torch.int64), ctx.ints([1])]))
    return value
