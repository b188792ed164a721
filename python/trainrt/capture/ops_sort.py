"""Ordering ops: topk and sort (values and indices), as MoE routers use them (ops/top_k_schema.cc):
the k first elements along an axis, largest or smallest first, NaN above every number as torch
orders it. sort is the engine's TopK of the whole axis: equal elements in index order (a stable
sort, as torch.sort is on the CPU). topk is TopKInTorchOrder: equal elements where torch's CPU
topk leaves them, which is not by index (its partial sort or selection), so that a router whose
scores tie (AFMoE's zero-initialized gate ties every expert) picks the experts eager picks, and
sorted=False gives torch's unsorted order. The values are differentiable (the gradient scatters dY
back to x, exactly torch's); the indices are not.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import dim_axis
from trainrt.capture.registry import translates


def _ordered(ctx: OpContext, x: TensorValue, dim: int, k, first_largest: bool, op: str = "TopK",
             sorted_: bool = True) -> list[str]:
    """(values, indices) of the first k elements of x along dim in the order `first_largest`."""
    axis = dim_axis(dim, x.rank)
    return ctx.emit(op, [x, ctx.ints([k])], 2, axis=axis, largest=int(first_largest), sorted=int(sorted_),
                    domain="com.trainrt" if op == "TopKInTorchOrder" else "")


def _check_orderable(ctx: OpContext, x: TensorValue) -> None:
    if x.dtype == torch.bool or x.dtype.is_complex:
        raise ctx.unsupported(f"of a {x.dtype} tensor has no TrainRT translation")


@translates("aten.topk.default")
def topk(ctx: OpContext) -> list[str]:
    """torch.topk(x, k, dim, largest, sorted) with torch's CPU order of equal elements."""
    x = ctx.tensor("self")
    _check_orderable(ctx, x)
    return _ordered(ctx, x, ctx["dim"], ctx["k"], bool(ctx["largest"]), "TopKInTorchOrder", bool(ctx["sorted"]))


@translates("aten.sort.default", "aten.sort.stable")
def sort(ctx: OpContext) -> list[str]:
    """torch.sort(x, dim, descending[, stable]): always stable (a stable order is one torch allows
    for stable=False)."""
    x = ctx.tensor("self")
    _check_orderable(ctx, x)
    axis = dim_axis(ctx["dim"], x.rank)
    if x.rank == 0:
        return [x.name, ctx.const(0, torch.int64)]
    return _ordered(ctx, x, axis, x.shape[axis], bool(ctx["descending"]))
