"""Writes at indices: index_put, the functional form of `x[mask] = v` and `x[i, j] = v` (and `+=`).

The engine has no ScatterND; the writes are composed from ops it differentiates, so x and v both
train (the gradient of x is dY where nothing was written, of v the sum of dY over its positions):
- one bool mask over x's leading dims: Where(mask, v, x), or Where(mask, x + v, x) to accumulate,
  v broadcast over the masked positions; or v with one row per masked element (its count known
  when the step runs), each position reading its row of v by the running count of the mask;
- integer index tensors on x's first k dims, broadcast to K positions: each position's flat offset
  f = i0 * d1 * .. * dk-1 + ... + ik-1 (negative indices counted back), compared with the P =
  d0 * .. * dk-1 offsets of x's indexed dims into a one-hot (K, P), then
      hit (P,)     = any over K of the one-hot            where something is written,
      written (P, R) = one-hot^T (P, K) @ v (K, R)          v broadcast to K rows of the rest R of x
                                                            (integers: a sum of Where, K * P * R),
      y            = Where(hit, written, x)   or   x + written to accumulate.
  A 0-d v needs no product: Where(hit, v, x), or x + count * v. The one-hot costs K * P: right for
  the masks and per-row writes of HF models (Wav2Vec2 marks each row's last frame in a
  (batch, frames) mask), not for scattering rows into a large table.
torch leaves duplicate positions undefined without accumulate; here their values add (a 0-d v
is written once).

index_add (`x.index_add(dim, index, source, alpha)`, the row sums of MoE layers that put each
expert's output back on its token) is ScatterElements with reduction add, which the engine
differentiates itself.
"""

from __future__ import annotations

import math

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import dim_axis, reshape_to
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


@translates("aten.index_put.default")
def index_put(ctx: OpContext) -> str:
    x, v = ctx.tensor("self"), ctx.tensor("values")
    indices = list(ctx["indices"])
    accumulate = bool(ctx["accumulate"])
    while indices and indices[-1] is None:
        indices.pop()
    if not indices or any(i is None for i in indices):
        raise ctx.unsupported("with indices on other than x's leading dims has no TrainRT translation")
    values = ctx.cast(v, x.dtype)
    if len(indices) == 1 and indices[0].dtype == torch.bool:
        return _put_masked(ctx, x, indices[0], v, values, accumulate)
    if any(i.dtype not in (torch.int64, torch.int32) for i in indices):
        raise ctx.unsupported("with several bool masks has no TrainRT translation")
    return _put_at_indices(ctx, x, indices, v, values, accumulate)


def _put_masked(ctx: OpContext, x: TensorValue, mask: TensorValue, v: TensorValue, values: str,
                accumulate: bool) -> str:
    """x[mask] = v for a mask of x's first mask.rank dims; v broadcasts over x's other dims, or
    holds one row per masked element (`_put_masked_rows`)."""
    rest = x.rank - mask.rank
    if v.rank == rest + 1:
        return _put_masked_rows(ctx, x, mask, values, accumulate)
    if v.rank > rest:
        raise ctx.unsupported(f"with values of rank {v.rank} for a mask of rank {mask.rank} into rank {x.rank} "
                              "has no TrainRT translation")
    where = ctx.emit("Unsqueeze", [mask, ctx.ints(range(mask.rank, x.rank))]) if rest else mask.name
    new = ctx.emit("Add", [x, values]) if accumulate else values
    return ctx.emit("Where", [where, new, x])


def _put_masked_rows(ctx: OpContext, x: TensorValue, mask: TensorValue, values: str, accumulate: bool) -> str:
    """x[mask] = v with v (K, *rest): the K masked positions, in row-major order, take v's rows in
    turn (X-MOD writes each language's adapter output back this way). Position p reads row
    cumsum(mask)[p] of [0-row; v], which is its own row where masked and the zero row elsewhere:
    a Gather (its gradient puts each row's dY back on v, once) and a Where; no K x P one-hot, and
    K = 0 needs no special case. x: (*lead, *rest), P = prod(lead)."""
    m = mask.rank
    positions = math.prod(x.shape[:m])
    rest = list(x.shape[m:])
    flat_mask = reshape_to(ctx, mask, [positions])  # (P,)
    taken = ctx.emit("CumSum", [ctx.cast_to(flat_mask, torch.bool, torch.int64), ctx.const(0, torch.int64)])
    row = ctx.emit("Where", [flat_mask, taken, ctx.const(0, torch.int64)])  # (P,) 0: the zero row
    padded = ctx.emit("Concat", [ctx.emit("Expand", [ctx.const(0, x.dtype), ctx.ints([1, *rest])]), values], axis=0)
    written = ctx.emit("Gather", [padded, row], axis=0)  # (P, *rest)
    x_flat = reshape_to(ctx, x, [positions, *rest])
    if accumulate:
        y = ctx.emit("Add", [x_flat, written])
    else:
        hit = ctx.emit("Unsqueeze", [flat_mask, ctx.ints(range(1, len(rest) + 1))]) if rest else flat_mask
        y = ctx.emit("Where", [hit, written, x_flat])
    return reshape_to(ctx, y, x.shape)


def _put_at_indices(ctx: OpContext, x: TensorValue, indices: list[TensorValue], v: TensorValue, values: str,
                    accumulate: bool) -> str:
    k = len(indices)
    index_shape = torch.broadcast_shapes(*(tuple(i.shape) for i in indices))  # K positions
    count = math.prod(index_shape)
    flat = None
    for axis, idx in enumerate(indices):  # Horner's rule over the indexed dims, each made non-negative
        size = ctx.operand(x.shape[axis], torch.int64)
        i = ctx.cast(idx, torch.int64)
        i = ctx.emit("Where", [ctx.emit("Less", [i, ctx.const(0, torch.int64)]), ctx.emit("Add", [i, size]), i])
        i = reshape_to(ctx, ctx.emit("Expand", [i, ctx.ints(index_shape)]), [count])
        flat = i if flat is None else ctx.emit("Add", [ctx.emit("Mul", [flat, size]), i])
    positions = math.prod(x.shape[:k])  # P
    offsets = ctx.emit("Range", [ctx.const(0, torch.int64), ctx.operand(positions, torch.int64),
                                 ctx.const(1, torch.int64)])  # (P,)
    onehot = ctx.emit("Equal", [ctx.emit("Unsqueeze", [flat, ctx.ints([1])]), offsets])  # (K, P)
    rest = list(x.shape[k:])
    x_flat = reshape_to(ctx, x, [positions, *rest])  # (P, *rest)
    trailing = ctx.ints(range(1, len(rest) + 1))

    def per_position(name: str) -> str:  # (P,) -> (P, 1, ..., 1)
        return ctx.emit("Unsqueeze", [name, trailing]) if rest else name

    if v.rank == 0 or (all(is_static(d) and int(d) == 1 for d in v.shape)):
        value = reshape_to(ctx, values, [])
        if accumulate:
            times = ctx.emit("ReduceSum", [ctx.cast_to(onehot, torch.bool, x.dtype), ctx.ints([0])], keepdims=0)
            y = ctx.emit("Add", [x_flat, ctx.emit("Mul", [per_position(times), value])])
        else:
            hit = ctx.emit("ReduceMax", [onehot, ctx.ints([0])], keepdims=0)  # (P,)
            y = ctx.emit("Where", [per_position(hit), value, x_flat])
        return reshape_to(ctx, y, x.shape)
    width = math.prod(rest)  # R
    rows = reshape_to(ctx, ctx.emit("Expand", [values, ctx.ints([*index_shape, *rest])]), [count, width])  # (K, R)
    if x.dtype.is_floating_point:
        scatter = ctx.emit("Transpose", [ctx.cast_to(onehot, torch.bool, x.dtype)], perm=[1, 0])  # (P, K)
        written = ctx.emit("MatMul", [scatter, rows])  # (P, R)
    else:  # integers (an inverse permutation, `inv[perm] = arange`): no integer MatMul in the engine
        picked = ctx.emit("Where", [ctx.emit("Unsqueeze", [onehot, ctx.ints([2])]),
                                    ctx.emit("Unsqueeze", [rows, ctx.ints([1])]), ctx.const(0, x.dtype)])  # (K, P, R)
        written = ctx.emit("ReduceSum", [picked, ctx.ints([0])], keepdims=0)  # (P, R)
    written = reshape_to(ctx, written, [positions, *rest])  # (P, *rest)
    if accumulate:
        y = ctx.emit("Add", [x_flat, written])
    else:
        hit = ctx.emit("ReduceMax", [onehot, ctx.ints([0])], keepdims=0)
        y = ctx.emit("Where", [per_position(hit), written, x_flat])
    return reshape_to(ctx, y, x.shape)


def _scatter_hits(ctx: OpContext, x: TensorValue, axis: int, index: TensorValue) -> str:
    """(..., k, n, ...) bool: hit[.., j, p, ..] = index[.., j, ..] == p, the positions p of x's
    axis (size n) that index entry j writes. index has x's shape except at the axis (k entries)."""
    for d, (a, b) in enumerate(zip(index.shape, x.shape)):
        if d != axis and not (a is b or str(a) == str(b)):
            raise ctx.unsupported(f"with an index of shape {index.shape} into {x.shape} has no TrainRT translation "
                                  "(the index must have the tensor's sizes except along dim)")
    size = ctx.operand(x.shape[axis], torch.int64)
    positions = ctx.emit("Range", [ctx.const(0, torch.int64), size, ctx.const(1, torch.int64)])  # (n,)
    trailing = x.rank - 1 - axis
    if trailing:
        positions = ctx.emit("Unsqueeze", [positions, ctx.ints(range(1, trailing + 1))])  # (n, 1, .., 1)
    entries = ctx.emit("Unsqueeze", [ctx.cast(index, torch.int64), ctx.ints([axis + 1])])  # (.., k, 1, ..)
    return ctx.emit("Equal", [entries, positions])


def _written(ctx: OpContext, hits: str, axis: int) -> str:
    """(..., n, ...) bool: some index entry writes the position."""
    count = ctx.emit("ReduceSum", [ctx.cast_to(hits, torch.bool, torch.int64), ctx.ints([axis])], keepdims=0)
    return ctx.emit("Greater", [count, ctx.const(0, torch.int64)])


def _summed(ctx: OpContext, hits: str, values: str, axis: int, dtype: torch.dtype) -> str:
    """(.., n, ..): at each position, the sum of the values of the index entries that hit it."""
    return ctx.emit("ReduceSum", [ctx.emit("Where", [hits, values, ctx.const(0, dtype)]), ctx.ints([axis])], keepdims=0)


@translates("aten.scatter.value")
def scatter_value(ctx: OpContext) -> str:
    """torch.scatter(x, dim, index, value): x with value at each position index names along dim,
    Where(written, value, x); x's gradient is dY where nothing was written. DeepSeek-V3's router
    marks its chosen expert groups with it. index must have x's sizes off dim (torch also takes a
    smaller index, which writes a corner of x)."""
    x, index = ctx.tensor("self"), ctx.tensor("index")
    axis = x.rank and (ctx["dim"] + x.rank if ctx["dim"] < 0 else ctx["dim"])
    hit = _written(ctx, _scatter_hits(ctx, x, axis, index), axis)
    return ctx.emit("Where", [hit, ctx.operand(ctx["value"], x.dtype), x])


@translates("aten.scatter.src")
def scatter_src(ctx: OpContext) -> str:
    """torch.scatter(x, dim, index, src): x with src[.., j, ..] at position index[.., j, ..] along
    dim (src read over index's shape). The values written are a sum over the index entries of
    Where(hit, src, 0), so src's gradient is dY at the position each entry wrote and x's is dY
    where nothing was written. torch leaves duplicate positions undefined; here they add."""
    x, index, src = ctx.tensor("self"), ctx.tensor("index"), ctx.tensor("src")
    axis = x.rank and (ctx["dim"] + x.rank if ctx["dim"] < 0 else ctx["dim"])
    if tuple(map(str, src.shape)) != tuple(map(str, index.shape)):
        raise ctx.unsupported(f"with src of shape {src.shape} and index of shape {index.shape} has no TrainRT "
                              "translation (src must have the index's shape)")
    hits = _scatter_hits(ctx, x, axis, index)  # (.., k, n, ..)
    values = ctx.emit("Unsqueeze", [ctx.cast(src, x.dtype), ctx.ints([axis + 1])])  # (.., k, 1, ..)
    return ctx.emit("Where", [_written(ctx, hits, axis), _summed(ctx, hits, values, axis, x.dtype), x])


@translates("aten.scatter_reduce.two")
def scatter_reduce(ctx: OpContext) -> str:
    """torch.scatter_reduce(x, dim, index, src, reduce, include_self): at each position of x along
    dim, the sum, mean, amax or amin of the src entries index sends there (with x's own value when
    include_self); positions no entry reaches keep x. Over the one-hot hits (.., k, n, ..): a
    ReduceSum of Where(hit, src, 0), a count for the mean, a ReduceMax/Min of Where(hit, src, -+inf).
    The gradients are torch's: amax/amin share dY evenly among equal extremes, as ReduceMax does
    (TAPAS averages, sums and takes the extremes of table cells this way)."""
    x, index, src = ctx.tensor("self"), ctx.tensor("index"), ctx.tensor("src")
    reduce, include_self = ctx["reduce"], bool(ctx["include_self"])
    if reduce not in ("sum", "mean", "amax", "amin"):
        raise ctx.unsupported(f"with reduce='{reduce}' has no TrainRT translation (sum, mean, amax, amin)")
    if tuple(map(str, src.shape)) != tuple(map(str, index.shape)):
        raise ctx.unsupported(f"with src of shape {src.shape} and index of shape {index.shape} has no TrainRT "
                              "translation (src must have the index's shape)")
    axis = x.rank and (ctx["dim"] + x.rank if ctx["dim"] < 0 else ctx["dim"])
    hits = _scatter_hits(ctx, x, axis, index)  # (.., k, n, ..)
    values = ctx.emit("Unsqueeze", [ctx.cast(src, x.dtype), ctx.ints([axis + 1])])  # (.., k, 1, ..)
    reached = _written(ctx, hits, axis)  # (.., n, ..)
    if reduce in ("sum", "mean"):
        total = _summed(ctx, hits, values, axis, x.dtype)
        if include_self:
            total = ctx.emit("Add", [total, x])
        if reduce == "mean":
            count = ctx.emit("ReduceSum", [ctx.cast_to(hits, torch.bool, x.dtype), ctx.ints([axis])], keepdims=0)
            if include_self:
                count = ctx.emit("Add", [count, ctx.const(1, x.dtype)])
            total = ctx.emit("Div", [total, ctx.emit("Max", [count, ctx.const(1, x.dtype)])])
    else:
        op, far = ("ReduceMax", float("-inf")) if reduce == "amax" else ("ReduceMin", float("inf"))
        candidates = ctx.emit("Where", [hits, values, ctx.const(far, x.dtype)])
        if include_self:
            candidates = ctx.emit("Concat", [candidates, ctx.emit("Unsqueeze", [x, ctx.ints([axis])])], axis=axis)
        total = ctx.emit(op, [candidates, ctx.ints([axis])], keepdims=0)
    return ctx.emit("Where", [reached, total, x])


@translates("aten.index_add.default")
def index_add(ctx: OpContext) -> str:
    """x.index_add(dim, index, source, alpha): y = x, then y[.., index[j], ..] += alpha *
    source[.., j, ..] along dim, repeated indices adding up (JetMoE's
    `zeros.index_add(0, batch_index, expert_outputs)`). index (k,) is expanded to source's shape
    (x's except k at dim) and the add is ScatterElements(x, index, alpha * source, axis=dim,
    reduction='add'), whose gradients are torch's: dX = dY and dSource = alpha * GatherElements(dY,
    index), dY read at the position each entry was added to. A 0-d x (and source) is taken as (1,)."""
    x, index, source = ctx.tensor("self"), ctx.tensor("index"), ctx.tensor("source")
    alpha = ctx.args.get("alpha", 1)
    rank = max(x.rank, 1)
    axis = dim_axis(ctx["dim"], rank)
    base = x.name if x.rank else reshape_to(ctx, x, [1])
    updates = ctx.cast(source, x.dtype)
    if not source.rank:
        updates = reshape_to(ctx, updates, [1])
    if alpha != 1:
        updates = ctx.emit("Mul", [updates, ctx.operand(alpha, x.dtype)])
    along = [-1 if d == axis else 1 for d in range(rank)]  # (1, .., k, .., 1)
    entries = ctx.emit("Reshape", [ctx.cast(index, torch.int64), ctx.ints(along)])
    entries = ctx.emit("Expand", [entries, ctx.emit("Shape", [updates])])  # source's shape
    y = ctx.emit("ScatterElements", [base, entries, updates], axis=axis, reduction="add")
    return y if x.rank else reshape_to(ctx, y, [])
