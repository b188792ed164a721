"""Reductions: sum, mean, amax/amin and the values of max/min over dims.

ONNX Reduce* (opset 18+) take the axes as an input; no axes input reduces every axis, which is
torch's meaning of `dim=None` and of an empty dim list.
"""

from __future__ import annotations

from trainrt.capture.context import OpContext
from trainrt.capture.registry import translates


def _reduce(ctx: OpContext, op: str, dims, keepdim: bool) -> str:
    """op over dims (all when None or empty) of self, converted to the output dtype first
    (torch sums bool and integer tensors in int64 and honors a dtype= argument)."""
    x = ctx.operand(ctx["self"], ctx.out_dtype if op in ("ReduceSum", "ReduceMean") else ctx["self"].dtype)
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


def _values_of(ctx: OpContext, op: str) -> list[str | None]:
    """(values, indices) of max.dim / min.dim; the indices need ArgMax/ArgMin, not in the engine."""
    if 1 in ctx.used_outputs():
        raise ctx.unsupported("indices have no TrainRT translation (the engine has no ArgMax/ArgMin)")
    return [_reduce(ctx, op, ctx["dim"], ctx["keepdim"]), None]


@translates("aten.max.dim")
def max_dim(ctx: OpContext) -> list[str | None]:
    return _values_of(ctx, "ReduceMax")


@translates("aten.min.dim")
def min_dim(ctx: OpContext) -> list[str | None]:
    return _values_of(ctx, "ReduceMin")
