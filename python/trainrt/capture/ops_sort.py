"""Ordering ops: topk and sort (values and indices), as MoE routers use them.

The engine has no TopK or sort kernel; both are composed from a rank per element:
    rank[i] = #{j : x[j] before x[i]} + #{j < i : x[j] == x[i]}           (..., n)
"before" is greater for topk's largest / sort's descending, less otherwise, and equal elements
keep their index order: a stable sort, as torch.sort is on the CPU. torch's topk orders ties as
its partial-sort kernel happens to (not by index): with tied values both pick a valid top k, but
not always the same elements (AFMoE's zero-initialized router ties every expert). The
ranks are a permutation of 0..n-1, so position r of the result holds the element of rank r:
    indices[r] = sum_i i * (rank[i] == r)      (..., k)   an integer path, no gradient
    values     = GatherElements(x, indices)     (..., k)   its gradient scatters dY back to x
which is exactly torch's gradient (values are differentiable, indices are not). The pairwise
comparison costs n * n per row: right for router scores (n = experts) and the token-expert
pairs of a tiny model's MoE layer (n = tokens * top_k), not for sorting long sequences, where an
engine TopK kernel is needed. NaN orders as torch orders it: above every number, NaNs equal
among themselves.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import dim_axis
from trainrt.capture.registry import translates


def _ordered(ctx: OpContext, x: TensorValue, dim: int, k, first_largest: bool) -> list[str]:
    """(values, indices) of the first k elements of x along dim in the order `first_largest`."""
    axis = dim_axis(dim, x.rank)
    last = x.rank - 1
    perm = list(range(x.rank))
    perm[axis], perm[last] = perm[last], perm[axis]
    moved = ctx.emit("Transpose", [x], perm=perm) if axis != last else x.name  # (..., n)
    n = ctx.operand(x.shape[axis], torch.int64)
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    iota = ctx.emit("Range", [zero, n, one])  # (n,)
    mine = ctx.emit("Unsqueeze", [moved, ctx.ints([last + 1])])  # (..., n, 1): element i
    theirs = ctx.emit("Unsqueeze", [moved, ctx.ints([last])])  # (..., 1, n): element j
    before = ctx.emit("Greater" if first_largest else "Less", [theirs, mine])  # (..., n, n)
    same = ctx.emit("Equal", [theirs, mine])
    if x.dtype.is_floating_point:  # NaN is above every number and equal to NaN
        nan_mine = ctx.emit("Not", [ctx.emit("Equal", [mine, mine])])
        nan_theirs = ctx.emit("Not", [ctx.emit("Equal", [theirs, theirs])])
        above = (nan_theirs, nan_mine) if first_largest else (nan_mine, nan_theirs)
        before = ctx.emit("Or", [before, ctx.emit("And", [above[0], ctx.emit("Not", [above[1]])])])
        same = ctx.emit("Or", [same, ctx.emit("And", [nan_mine, nan_theirs])])
    earlier = ctx.emit("Less", [iota, ctx.emit("Unsqueeze", [iota, ctx.ints([1])])])  # (n, n): j < i
    tie = ctx.emit("And", [same, earlier])
    beaten = ctx.cast_to(ctx.emit("Or", [before, tie]), torch.bool, torch.int64)
    rank = ctx.emit("ReduceSum", [beaten, ctx.ints([last + 1])], keepdims=0)  # (..., n)
    count = ctx.operand(k, torch.int64)
    wanted = ctx.emit("Unsqueeze", [ctx.emit("Range", [zero, count, one]), ctx.ints([1])])  # (k, 1)
    hit = ctx.emit("Equal", [ctx.emit("Unsqueeze", [rank, ctx.ints([last])]), wanted])  # (..., k, n)
    indices = ctx.emit("ReduceSum", [ctx.emit("Where", [hit, iota, zero]), ctx.ints([last + 1])], keepdims=0)
    values = ctx.emit("GatherElements", [moved, indices], axis=last)  # (..., k)
    if axis != last:
        values = ctx.emit("Transpose", [values], perm=perm)
        indices = ctx.emit("Transpose", [indices], perm=perm)
    return [values, indices]


def _check_orderable(ctx: OpContext, x: TensorValue) -> None:
    if x.dtype == torch.bool or x.dtype.is_complex:
        raise ctx.unsupported(f"of a {x.dtype} tensor has no TrainRT translation")


@translates("aten.topk.default")
def topk(ctx: OpContext) -> list[str]:
    """torch.topk(x, k, dim, largest, sorted): sorted or not, the k come in order (an order
    torch allows for sorted=False)."""
    x = ctx.tensor("self")
    _check_orderable(ctx, x)
    return _ordered(ctx, x, ctx["dim"], ctx["k"], bool(ctx["largest"]))


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
