"""Reductions: sum, mean, amax/amin, max/min over dims with their indices, argmax/argmin.

ONNX Reduce* (opset 18+) take the axes as an input; no axes input reduces every axis, which is
torch's meaning of `dim=None` and of an empty dim list. argmax / argmin and the indices of max.dim /
min.dim are the engine's ArgMax / ArgMin.
"""

from __future__ import annotations

import math

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates


def _reduce(ctx: OpContext, op: str, dims, keepdim: bool) -> str:
    """op over dims (all when None or empty) of self, converted to the output dtype first
    (torch sums bool and integer tensors in int64 and honors a dtype= argument)."""
    x = ctx.operand(ctx["self"], ctx.out_dtype if op in ("ReduceSum", "ReduceMean", "ReduceLogSumExp")
                    else ctx["self"].dtype)
    dims = [dims] if isinstance(dims, int) else dims
    axes = ctx.ints(dims) if dims else None
    return ctx.emit(op, [x, axes], keepdims=int(bool(keepdim)))


@translates("aten.sum.dim_IntList")
def sum_dims(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceSum", ctx["dim"], ctx["keepdim"])


@translates("aten.sum.default")
def sum_all(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceSum", None, False)


@translates("aten.mean.dim")
def mean_dims(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMean", ctx["dim"], ctx["keepdim"])


@translates("aten.mean.default")
def mean_all(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMean", None, False)


@translates("aten.logsumexp.default")
def logsumexp(ctx: OpContext) -> str:
    """log(sum(exp(x))) over dim: ONNX ReduceLogSumExp (integer inputs in the float output dtype)."""
    return _reduce(ctx, "ReduceLogSumExp", ctx["dim"], ctx["keepdim"])


@translates("aten.amax.default")
def amax(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMax", ctx["dim"], ctx["keepdim"])


@translates("aten.amin.default")
def amin(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMin", ctx["dim"], ctx["keepdim"])


@translates("aten.max.default")
def max_all(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMax", None, False)


@translates("aten.min.default")
def min_all(ctx: OpContext) -> str:
    return _reduce(ctx, "ReduceMin", None, False)


def _first_index_of_extreme(ctx: OpContext, x: TensorValue | str, shape, axis: int, op: str, keepdim: bool,
                            extreme: str | None = None) -> str:
    """The int64 index along `axis` of the first largest (`op` ReduceMax) or smallest element, as
    torch's argmax / argmin (a NaN's index where there is one): the engine's ArgMax / ArgMin.
    x: (..., n, ...); the result (..., 1, ...) or without the axis. No gradient flows through it."""
    return ctx.emit("ArgMax" if op == "ReduceMax" else "ArgMin", [x], axis=axis, keepdims=int(bool(keepdim)),
                    select_last_index=0)


def _values_of(ctx: OpContext, op: str) -> list[str | None]:
    """(values, indices) of max.dim / min.dim: the indices only when read."""
    x = ctx.tensor("self")
    axis = ctx["dim"] + x.rank if ctx["dim"] < 0 else ctx["dim"]
    keepdim = bool(ctx["keepdim"])
    if 1 not in ctx.used_outputs():
        return [_reduce(ctx, op, ctx["dim"], keepdim), None]
    extreme = ctx.emit(op, [x, ctx.ints([axis])], keepdims=1)
    indices = _first_index_of_extreme(ctx, x, x.shape, axis, op, keepdim, extreme)
    values = extreme if keepdim else ctx.emit("Squeeze", [extreme, ctx.ints([axis])])
    return [values, indices]


def _arg(ctx: OpContext, op: str) -> str:
    """argmax / argmin over dim, or over the flattened tensor when dim is None (keepdim then
    gives x's rank of 1s)."""
    x = ctx.tensor("self")
    dim, keepdim = ctx["dim"], bool(ctx["keepdim"])
    if dim is None:
        flat = [math.prod(x.shape)]
        y = ctx.emit("Reshape", [x, ctx.ints([-1])])
        index = _first_index_of_extreme(ctx, y, flat, 0, op, keepdim=False)
        return ctx.emit("Reshape", [index, ctx.ints([1] * x.rank if keepdim else [])])
    axis = dim + x.rank if dim < 0 else dim
    return _first_index_of_extreme(ctx, x, x.shape, axis, op, keepdim)


@translates("aten.linalg_vector_norm.default")
def vector_norm(ctx: OpContext) -> str:
    """torch.linalg.vector_norm over dim (all dims when None): ord 2 is ReduceL2, 1 ReduceL1,
    inf ReduceMax of |x| (each differentiable in the engine); other orders have no translation."""
    order = ctx["ord"]
    op = {2: "ReduceL2", 1: "ReduceL1", float("inf"): "ReduceMax"}.get(order)
    if op is None or ctx["dtype"] is not None:
        raise ctx.unsupported(f"with ord={order} or a dtype has no TrainRT translation (ord 1, 2 and inf)")
    x = ctx.tensor("self")
    if op == "ReduceMax":
        x = ctx.emit("Abs", [x])
    dims = ctx["dim"]
    dims = [dims] if isinstance(dims, int) else dims
    return ctx.emit(op, [x, ctx.ints(dims) if dims else None], keepdims=int(bool(ctx["keepdim"])))


@translates("aten.argmax.default")
def argmax(ctx: OpContext) -> str:
    return _arg(ctx, "ReduceMax")


@translates("aten.argmin.default")
def argmin(ctx: OpContext) -> str:
    return _arg(ctx, "ReduceMin")


@translates("aten.max.dim")
def max_dim(ctx: OpContext) -> list[str | None]:
    return _values_of(ctx, "ReduceMax")


@translates("aten.min.dim")
def min_dim(ctx: OpContext) -> list[str | None]:
    return _values_of(ctx, "ReduceMin")
