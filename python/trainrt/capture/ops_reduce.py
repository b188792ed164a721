"""Reductions: sum, mean, amax/amin, max/min over dims with their indices, argmax/argmin,
variance and standard deviation.

ONNX Reduce* (opset 18+) take the axes as an input; no axes input reduces every axis, which is
torch's meaning of `dim=None` and of an empty dim list. argmax / argmin and the indices of max.dim /
min.dim are the engine's ArgMax / ArgMin; max.dim's values are gathered at those indices, so that
their gradient goes where torch's goes.
"""

from __future__ import annotations

import math

import sympy
import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import sym_expr


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


def _first_index_of_extreme(ctx: OpContext, x: TensorValue | str, shape, axis: int, op: str, keepdim: bool) -> str:
    """The int64 index along `axis` of the first largest (`op` ReduceMax) or smallest element, as
    torch's argmax / argmin (a NaN's index where there is one): the engine's ArgMax / ArgMin.
    x: (..., n, ...); the result (..., 1, ...) or without the axis. No gradient flows through it."""
    return ctx.emit("ArgMax" if op == "ReduceMax" else "ArgMin", [x], axis=axis, keepdims=int(bool(keepdim)),
                    select_last_index=0)


def _values_of(ctx: OpContext, op: str) -> list[str | None]:
    """(values, indices) of max.dim / min.dim: values = GatherElements(x, first index of the extreme).

    torch.max(x, dim)'s gradient goes to the one element its indices name, the first of ties
    (value_selecting_reduction_backward); amax's (a Reduce*, above) is shared evenly among ties.
    Gathering at the index gives torch's: GatherElements' gradient scatters dY to that element only.
    x: (..., n, ...); index and values (..., 1, ...), squeezed without keepdim."""
    x = ctx.tensor("self")
    axis = ctx["dim"] + x.rank if ctx["dim"] < 0 else ctx["dim"]
    keepdim = bool(ctx["keepdim"])
    index = _first_index_of_extreme(ctx, x, x.shape, axis, op, keepdim=True)
    values = ctx.emit("GatherElements", [x, index], axis=axis)
    if keepdim:
        return [values, index]
    squeeze = lambda t: ctx.emit("Squeeze", [t, ctx.ints([axis])])  # noqa: E731
    return [squeeze(values), squeeze(index) if 1 in ctx.used_outputs() else None]


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


def _variance(ctx: OpContext, with_mean: bool = False) -> tuple[str, str | None]:
    """(variance, mean if with_mean) of self over dim (all dims when None or empty), torch.var's definition:
    sum((x - mean)^2) / max(0, N - correction), N the count of reduced elements (symbolic with the
    batch), correction 1 when not given (the .dim and .default overloads say unbiased instead:
    correction 1 or 0). Spelled with ops the engine differentiates."""
    x = ctx.tensor("self")
    names = ctx.args.keys()  # every argument of the overload's schema, defaults bound
    dims = ctx["dim"] if "dim" in names else None
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    axes = [d % x.rank for d in dims] if dims else list(range(x.rank))
    keepdim = int(bool(ctx["keepdim"])) if "keepdim" in names else 0
    if "correction" in names:
        correction = 1.0 if ctx["correction"] is None else float(ctx["correction"])
    else:
        correction = 1.0 if ctx["unbiased"] else 0.0
    axes_value = ctx.ints(axes) if axes else None
    mean = ctx.emit("ReduceMean", [x, axes_value], keepdims=1)
    centered = ctx.emit("Sub", [x, mean])
    squares = ctx.emit("ReduceSum", [ctx.emit("Mul", [centered, centered]), axes_value], keepdims=keepdim)
    n = sympy.Mul(*[sym_expr(x.shape[a]) for a in axes])
    if n.is_number:
        divisor = ctx.const(max(0.0, int(n) - correction), x.dtype)
    else:
        count = ctx.emit("Reshape", [ctx.symbols.lower(n), ctx.b.const([], torch.int64)])  # () int64
        count = ctx.cast_to(count, torch.int64, x.dtype)
        divisor = ctx.emit("Relu", [ctx.emit("Sub", [count, ctx.const(correction, x.dtype)])])
    variance = ctx.emit("Div", [squares, divisor])
    if with_mean and not keepdim:
        mean = ctx.emit("Squeeze", [mean, axes_value or ctx.ints(range(x.rank))])
    return variance, mean if with_mean else None


@translates("aten.var.correction", "aten.var.dim", "aten.var.default")
def var(ctx: OpContext) -> str:
    return _variance(ctx)[0]


@translates("aten.std.correction", "aten.std.dim", "aten.std.default")
def std(ctx: OpContext) -> str:
    return ctx.emit("Sqrt", [_variance(ctx)[0]])


@translates("aten.var_mean.correction", "aten.var_mean.dim")
def var_mean(ctx: OpContext) -> list[str]:
    return list(_variance(ctx, with_mean=True))


@translates("aten.std_mean.correction", "aten.std_mean.dim")
def std_mean(ctx: OpContext) -> list[str]:
    variance, mean = _variance(ctx, with_mean=True)
    return [ctx.emit("Sqrt", [variance]), mean]


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


@translates("aten.histc.default")
def histc(ctx: OpContext) -> str:
    """torch.histc(x, bins, min, max): counts of x's elements in `bins` equal bins over
    [min, max], elements outside left out, max itself in the last bin; min == max takes the data's
    range (widened by 1 each side when that is one value). torch's CPU kernel puts an element in
    the bin of the last edge of linspace(min, max, bins + 1) at or below it; so here:
        bin[x] = #{interior edges e : x >= e}            (N,) in 0..bins-1
        counts = sum over x in [min, max] of one_hot(bin[x])   (bins,)
    Counts are piecewise constant in x: no gradient flows (torch has no derivative for histc).
    MoE layers count the tokens routed to each expert with it."""
    x = ctx.tensor("self")
    bins, low, high = int(ctx["bins"]), float(ctx["min"]), float(ctx["max"])
    if not x.dtype.is_floating_point:
        raise ctx.unsupported(f"of a {x.dtype} tensor has no translation (torch's CPU histc takes floats)")
    if low > high:
        raise ctx.unsupported(f"with min={low} > max={high} has no translation (torch refuses it)")
    flat = ctx.emit("Reshape", [x, ctx.ints([-1, 1])])  # (N, 1)
    if low < high:
        lo, hi = ctx.const(low, x.dtype), ctx.const(high, x.dtype)
        edges = torch.linspace(low, high, bins + 1, dtype=x.dtype)[1:-1].tolist()
        interior = ctx.b.const(edges, x.dtype) if bins > 1 else None  # (bins - 1,)
    else:
        lo, hi = _data_range(ctx, flat, x.dtype)
        interior = _linspace_interior(ctx, lo, hi, bins, x.dtype) if bins > 1 else None
    inside = ctx.emit("And", [ctx.emit("GreaterOrEqual", [flat, lo]), ctx.emit("LessOrEqual", [flat, hi])])  # (N, 1)
    if interior is None:
        hit = inside
    else:
        above = ctx.cast_to(ctx.emit("GreaterOrEqual", [flat, interior]), torch.bool, torch.int64)  # (N, bins - 1)
        index = ctx.emit("ReduceSum", [above, ctx.ints([1])], keepdims=1)  # (N, 1)
        bin_ids = ctx.emit("Range", [ctx.const(0, torch.int64), ctx.const(bins, torch.int64),
                                     ctx.const(1, torch.int64)])  # (bins,)
        hit = ctx.emit("And", [ctx.emit("Equal", [index, bin_ids]), inside])  # (N, bins)
    counts = ctx.emit("ReduceSum", [ctx.cast_to(hit, torch.bool, x.dtype), ctx.ints([0])], keepdims=0)
    return ctx.emit("StopGradient", [counts], domain="com.trainrt")


def _data_range(ctx: OpContext, flat: str, dtype: torch.dtype) -> tuple[str, str]:
    """(min, max) of the data as 0-d tensors, each moved out by 1 when they are equal (torch's
    histc with min == max)."""
    lo = ctx.emit("ReduceMin", [flat, None], keepdims=0)
    hi = ctx.emit("ReduceMax", [flat, None], keepdims=0)
    same = ctx.cast_to(ctx.emit("Equal", [lo, hi]), torch.bool, dtype)
    return ctx.emit("Sub", [lo, same]), ctx.emit("Add", [hi, same])


def _linspace_interior(ctx: OpContext, lo: str, hi: str, bins: int, dtype: torch.dtype) -> str:
    """linspace(lo, hi, bins + 1)[1:-1] of 0-d tensors, as torch's CPU kernel computes it: step =
    (hi - lo) / bins, lo + i * step for the first half of the points, hi - (bins - i) * step for
    the rest (RangeFactoriesKernel.cpp)."""
    step = ctx.emit("Div", [ctx.emit("Sub", [hi, lo]), ctx.const(float(bins), dtype)])
    i = list(range(1, bins))
    from_low = ctx.emit("Add", [lo, ctx.emit("Mul", [ctx.b.const([float(k) for k in i], dtype), step])])
    from_high = ctx.emit("Sub", [hi, ctx.emit("Mul", [ctx.b.const([float(bins - k) for k in i], dtype), step])])
    first_half = ctx.b.const([k < (bins + 1) // 2 for k in i], torch.bool)
    return ctx.emit("Where", [first_half, from_low, from_high])  # (bins - 1,)
