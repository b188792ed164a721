"""Shape and data-movement ATen ops: views, transposes, concat/split, slicing, gathers.

torch views become copies here (ONNX values are immutable); functionalization already replaced
every in-place write through a view, so reading through a view equals reading a copy. Target
shapes come from the FakeTensor of the output: with one symbolic dim it becomes -1 and the shape is
a constant, otherwise the symbolic dims are computed from input shapes (symbolic.py).
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static

INT64_MAX = 2**63 - 1


def _axis(dim: int, rank: int) -> int:
    """A torch dim made non-negative (rank 0 tensors accept dims 0 and -1)."""
    return dim + max(rank, 1) if dim < 0 else dim


def reshape_to(ctx: OpContext, x: TensorValue, shape) -> str:
    """Reshape x to a (possibly symbolic) shape: one symbolic dim becomes -1 so the shape is a
    constant; a 0-sized dim needs allowzero so 0 is not read as 'copy the input dim'."""
    dims = list(shape)
    dynamic = [i for i, d in enumerate(dims) if not is_static(d)]
    has_zero = any(is_static(d) and int(d) == 0 for d in dims)
    if len(dynamic) == 1 and not has_zero:
        dims[dynamic[0]] = -1
    return ctx.emit("Reshape", [x, ctx.ints(dims)], allowzero=1 if has_zero else None)


@translates("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
            "aten.flatten.using_ints", "aten.unflatten.int")
def view(ctx: OpContext) -> str:
    return reshape_to(ctx, ctx.tensor("self"), ctx.out.shape)


@translates("aten.detach.default")
def detach(ctx: OpContext) -> str:
    """The value passes, its gradient does not (TrainRT's StopGradient)."""
    return ctx.emit("StopGradient", [ctx.tensor("self")], domain="com.trainrt")


@translates("aten.contiguous.default", "aten.clone.default", "aten.alias.default",
            "aten.lift_fresh_copy.default")
def identity(ctx: OpContext) -> str:
    """Copies and aliases are the same value in a graph of immutable values (no node)."""
    return ctx.tensor("self").name


@translates("aten.t.default")
def t(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    return x.name if x.rank < 2 else ctx.emit("Transpose", [x], perm=[1, 0])


@translates("aten.transpose.int")
def transpose(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    if x.rank < 2:
        return x.name
    perm = list(range(x.rank))
    a, b = _axis(ctx["dim0"], x.rank), _axis(ctx["dim1"], x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("Transpose", [x], perm=perm)


@translates("aten.permute.default")
def permute(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    return ctx.emit("Transpose", [x], perm=[_axis(d, x.rank) for d in ctx["dims"]])


@translates("aten.expand.default")
def expand(ctx: OpContext) -> str:
    """ONNX Expand broadcasts both ways, so torch's -1 ('keep this dim') is a 1."""
    sizes = [1 if is_static(s) and int(s) == -1 else s for s in ctx["size"]]
    return ctx.emit("Expand", [ctx.tensor("self"), ctx.ints(sizes)])


@translates("aten.broadcast_tensors.default")
def broadcast_tensors(ctx: OpContext) -> list[str]:
    out_shape = ctx.out[0].shape
    return [x.name if x.shape == tuple(out_shape) else ctx.emit("Expand", [x, ctx.ints(out_shape)])
            for x in ctx["tensors"]]


@translates("aten.unsqueeze.default")
def unsqueeze(ctx: OpContext) -> str:
    return ctx.emit("Unsqueeze", [ctx.tensor("self"), ctx.ints([ctx["dim"]])])


@translates("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims")
def squeeze(ctx: OpContext) -> str:
    """torch squeezes only the asked dims of size 1 and keeps the others silently."""
    x = ctx.tensor("self")
    dims = ctx.args.get("dim", range(x.rank))
    dims = [dims] if isinstance(dims, int) else dims
    axes = sorted({_axis(d, x.rank) for d in dims}) if x.rank else []
    axes = [a for a in axes if is_static(x.shape[a]) and int(x.shape[a]) == 1]
    return ctx.emit("Squeeze", [x, ctx.ints(axes)]) if axes else x.name


@translates("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default")
def split(ctx: OpContext) -> list[str]:
    """Split into the output FakeTensors' sizes along dim (whatever the form of the request)."""
    x = ctx.tensor("self")
    axis = _axis(ctx["dim"], x.rank)
    sizes = [o.shape[axis] for o in ctx.out]
    if len(sizes) == 1:
        return [x.name]
    return ctx.emit("Split", [x, ctx.ints(sizes)], len(sizes), axis=axis)


@translates("aten.unbind.int")
def unbind(ctx: OpContext) -> list[str]:
    """Split into pieces of 1, each squeezed."""
    x = ctx.tensor("self")
    axis = _axis(ctx["dim"], x.rank)
    n = len(ctx.out)
    parts = [x.name] if n == 1 else ctx.emit("Split", [x, ctx.ints([1] * n)], n, axis=axis)
    return [ctx.emit("Squeeze", [p, ctx.ints([axis])]) for p in parts]


@translates("aten.cat.default")
def cat(ctx: OpContext) -> str:
    """Concat in the promoted dtype; torch's legacy skip of 1-D empty tensors is kept."""
    t = ctx.out_dtype
    rank = len(ctx.out.shape)
    parts = [ctx.cast(x, t) for x in ctx["tensors"]
             if not (x.rank == 1 and rank > 1 and is_static(x.shape[0]) and int(x.shape[0]) == 0)]
    return ctx.emit("Concat", parts, axis=_axis(ctx["dim"], rank))


@translates("aten.stack.default")
def stack(ctx: OpContext) -> str:
    rank = len(ctx.out.shape)
    axis = _axis(ctx["dim"], rank)
    t = ctx.out_dtype
    parts = [ctx.emit("Unsqueeze", [ctx.cast(x, t), ctx.ints([axis])]) for x in ctx["tensors"]]
    return ctx.emit("Concat", parts, axis=axis)


@translates("aten.slice.Tensor")
def slice_(ctx: OpContext) -> str:
    """Slice one axis; the full slices export emits (x[:, 1:] starts with x[0:INT64_MAX]) are free."""
    x = ctx.tensor("self")
    axis = _axis(ctx["dim"], x.rank)
    start = 0 if ctx["start"] is None else ctx["start"]
    end = INT64_MAX if ctx["end"] is None else ctx["end"]
    step = ctx["step"]
    size = x.shape[axis]
    to_end = is_static(end) and (int(end) >= 2**62 or (is_static(size) and int(end) >= int(size)))
    if to_end and is_static(start) and int(start) == 0 and step == 1:
        return x.name
    return ctx.emit("Slice", [x, ctx.ints([start]), ctx.ints([end]), ctx.ints([axis]), ctx.ints([step])])


@translates("aten.select.int")
def select(ctx: OpContext) -> str:
    """Gather with a 0-d index drops the axis, as select does (negative indices count back)."""
    x = ctx.tensor("self")
    return ctx.emit("Gather", [x, ctx.scalar_int(ctx["index"])], axis=_axis(ctx["dim"], x.rank))


@translates("aten.index_select.default")
def index_select(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    return ctx.emit("Gather", [x, ctx.tensor("index")], axis=_axis(ctx["dim"], x.rank))


@translates("aten.index.Tensor")
def index(ctx: OpContext) -> str:
    """x[..., idx, ...] with one integer index tensor: Gather on that axis. Several index tensors
    or a bool mask (data-dependent shape) have no translation."""
    x = ctx.tensor("self")
    given = [(axis, i) for axis, i in enumerate(ctx["indices"]) if i is not None]
    if len(given) != 1 or given[0][1].dtype not in (torch.int64, torch.int32):
        raise ctx.unsupported("with other than one integer index tensor has no TrainRT translation")
    axis, idx = given[0]
    return ctx.emit("Gather", [x, idx], axis=axis)


@translates("aten.embedding.default")
def embedding(ctx: OpContext) -> str:
    """Rows of the weight. nn.Embedding(padding_idx=...) trains differently (the padding row gets
    no gradient), which plain Gather cannot say: refused until the engine has that op."""
    if ctx["padding_idx"] is not None and ctx["padding_idx"] >= 0:
        raise ctx.unsupported(f"with padding_idx={ctx['padding_idx']} has no TrainRT translation yet "
                              "(the padding row must get no gradient; plain Gather would train it)")
    return ctx.emit("Gather", [ctx.tensor("weight"), ctx.tensor("indices")], axis=0)


def _trilu(ctx: OpContext, upper: int) -> str:
    return ctx.emit("Trilu", [ctx.tensor("self"), ctx.scalar_int(ctx["diagonal"])], upper=upper)


@translates("aten.tril.default")
def tril(ctx: OpContext) -> str:
    return _trilu(ctx, upper=0)


@translates("aten.triu.default")
def triu(ctx: OpContext) -> str:
    return _trilu(ctx, upper=1)


@translates("aten.gather.default")
def gather(ctx: OpContext) -> str:
    """torch.gather is ONNX GatherElements (the index has the output's shape)."""
    x = ctx.tensor("self")
    return ctx.emit("GatherElements", [x, ctx.tensor("index")], axis=_axis(ctx["dim"], x.rank))
