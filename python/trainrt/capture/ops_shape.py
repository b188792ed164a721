"""Shape and data-movement ATen ops: views, transposes, concat/split, slicing, gathers.

torch views become copies here (ONNX values are immutable); functionalization already replaced
every in-place write through a view, so reading through a view equals reading a copy. Target
shapes come from the FakeTensor of the output: with one symbolic dim it becomes -1 and the shape is
a constant, otherwise the symbolic dims are computed from input shapes (symbolic.py).
"""

from __future__ import annotations

import math

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.onnx_builder import fill_value
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static

INT64_MAX = 2**63 - 1


def dim_axis(dim: int, rank: int) -> int:
    """A torch dim made non-negative (rank 0 tensors accept dims 0 and -1)."""
    return dim + max(rank, 1) if dim < 0 else dim


def reshape_to(ctx: OpContext, x: TensorValue | str, shape) -> str:
    """Reshape x to a (possibly symbolic) shape: one symbolic dim becomes -1 so the shape is a
    constant; a 0-sized dim needs allowzero so 0 is not read as 'copy the input dim'."""
    dims = list(shape)
    dynamic = [i for i, d in enumerate(dims) if not is_static(d)]
    has_zero = any(is_static(d) and int(d) == 0 for d in dims)
    if len(dynamic) == 1 and not has_zero:
        dims[dynamic[0]] = -1
    return ctx.emit("Reshape", [x, ctx.ints(dims)], allowzero=1 if has_zero else None)


@translates("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
            "aten.flatten.using_ints", "aten.unflatten.int", "aten.view_as.default", "aten.reshape_as.default")
def view(ctx: OpContext) -> str:
    return reshape_to(ctx, ctx.tensor("self"), ctx.out.shape)


@translates("aten.detach.default", "aten.detach_.default")
def detach(ctx: OpContext) -> str:
    """The value passes, its gradient does not (TrainRT's StopGradient). export.py leaves the
    in-place detach_ unfunctionalized: its output is the detached value, while later uses of its
    input keep the input's gradient path (right for the fresh constants HF's caches detach)."""
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
    a, b = dim_axis(ctx["dim0"], x.rank), dim_axis(ctx["dim1"], x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.emit("Transpose", [x], perm=perm)


@translates("aten.mT.default", "aten.mH.default", "aten.adjoint.default")
def matrix_transpose(ctx: OpContext) -> str:
    """x.mT: the last two dims swapped (mH and adjoint are the same on real tensors). Export
    decomposes it, but not inside a torch.cond branch."""
    x = ctx.tensor("self")
    perm = list(range(x.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return ctx.emit("Transpose", [x], perm=perm)


@translates("aten.numpy_T.default")
def numpy_t(ctx: OpContext) -> str:
    """x.T: the dims reversed."""
    x = ctx.tensor("self")
    return x.name if x.rank < 2 else ctx.emit("Transpose", [x], perm=list(reversed(range(x.rank))))


@translates("aten.permute.default")
def permute(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    return ctx.emit("Transpose", [x], perm=[dim_axis(d, x.rank) for d in ctx["dims"]])


@translates("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
def expand(ctx: OpContext) -> str:
    """ONNX Expand broadcasts both ways, so torch's -1 ('keep this dim') is a 1. expand_as takes
    the other tensor's sizes."""
    sizes = ctx["size"] if "size" in ctx.args else ctx.out.shape
    sizes = [1 if is_static(s) and int(s) == -1 else s for s in sizes]
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
    axes = sorted({dim_axis(d, x.rank) for d in dims}) if x.rank else []
    axes = [a for a in axes if is_static(x.shape[a]) and int(x.shape[a]) == 1]
    return ctx.emit("Squeeze", [x, ctx.ints(axes)]) if axes else x.name


@translates("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
            "aten.tensor_split.sections")
def split(ctx: OpContext) -> list[str]:
    """Split into the output FakeTensors' sizes along dim (whatever the form of the request)."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], x.rank)
    sizes = [o.shape[axis] for o in ctx.out]
    if len(sizes) == 1:
        return [x.name]
    return ctx.emit("Split", [x, ctx.ints(sizes)], len(sizes), axis=axis)


@translates("aten.tensor_split.indices")
def tensor_split_at(ctx: OpContext) -> list[str]:
    """torch.tensor_split(x, indices, dim): x[:i0], x[i0:i1], ..., x[ik:] along dim, each a Slice
    with Python's slice semantics (ONNX Slice's: negative positions count from the end, positions
    clamp, a start past the end gives an empty piece), so decreasing or out-of-range indices give
    torch's pieces, which may overlap (Split cannot say that)."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], x.rank)
    bounds = [0, *ctx["indices"], INT64_MAX]
    return [ctx.emit("Slice", [x, ctx.ints([start]), ctx.ints([end]), ctx.ints([axis]), ctx.ints([1])])
            for start, end in zip(bounds[:-1], bounds[1:])]


@translates("aten.unbind.int")
def unbind(ctx: OpContext) -> list[str]:
    """Split into pieces of 1, each squeezed."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], x.rank)
    n = len(ctx.out)
    parts = [x.name] if n == 1 else ctx.emit("Split", [x, ctx.ints([1] * n)], n, axis=axis)
    return [ctx.emit("Squeeze", [p, ctx.ints([axis])]) for p in parts]


@translates("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def cat(ctx: OpContext) -> str:
    """Concat in the promoted dtype; torch's legacy skip of 1-D empty tensors is kept."""
    t = ctx.out_dtype
    rank = len(ctx.out.shape)
    parts = [ctx.cast(x, t) for x in ctx["tensors"]
             if not (x.rank == 1 and rank > 1 and is_static(x.shape[0]) and int(x.shape[0]) == 0)]
    return ctx.emit("Concat", parts, axis=dim_axis(ctx["dim"], rank))


@translates("aten.stack.default")
def stack(ctx: OpContext) -> str:
    rank = len(ctx.out.shape)
    axis = dim_axis(ctx["dim"], rank)
    t = ctx.out_dtype
    parts = [ctx.emit("Unsqueeze", [ctx.cast(x, t), ctx.ints([axis])]) for x in ctx["tensors"]]
    return ctx.emit("Concat", parts, axis=axis)


@translates("aten.slice.Tensor")
def slice_(ctx: OpContext) -> str:
    """Slice one axis; the full slices export emits (x[:, 1:] starts with x[0:INT64_MAX]) are free."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], x.rank)
    start = 0 if ctx["start"] is None else ctx["start"]
    end = INT64_MAX if ctx["end"] is None else ctx["end"]
    step = ctx["step"]
    size = x.shape[axis]
    to_end = is_static(end) and (int(end) >= 2**62 or (is_static(size) and int(end) >= int(size)))
    if to_end and is_static(start) and int(start) == 0 and step == 1:
        return x.name
    return ctx.emit("Slice", [x, ctx.ints([start]), ctx.ints([end]), ctx.ints([axis]), ctx.ints([step])])


@translates("aten.flip.default")
def flip(ctx: OpContext) -> str:
    """torch.flip(x, dims): one Slice walking each flipped axis backwards (start -1, end before the
    first element, step -1); its gradient (SliceGrad) flips dY back. No dims: x itself."""
    x = ctx.tensor("self")
    axes = [dim_axis(d, x.rank) for d in ctx["dims"]]
    if not axes or x.rank == 0:
        return x.name
    back = ctx.ints([-1] * len(axes))
    return ctx.emit("Slice", [x, back, ctx.ints([-INT64_MAX - 1] * len(axes)), ctx.ints(axes), back])


@translates("aten.select.int")
def select(ctx: OpContext) -> str:
    """Gather with a 0-d index drops the axis, as select does (negative indices count back)."""
    x = ctx.tensor("self")
    return ctx.emit("Gather", [x, ctx.scalar_int(ctx["index"])], axis=dim_axis(ctx["dim"], x.rank))


@translates("aten.index_select.default")
def index_select(ctx: OpContext) -> str:
    x = ctx.tensor("self")
    return ctx.emit("Gather", [x, ctx.tensor("index")], axis=dim_axis(ctx["dim"], x.rank))


@translates("aten.index.Tensor")
def index(ctx: OpContext) -> str:
    """x[..., i0, i1, ..., ik, ...] with integer index tensors on adjacent dims a .. a+k (leading
    unindexed dims allowed, as `x[:, i, j]`): the indexed dims are flattened into one, and the
    broadcast indices into one flat index i0 * d1 * .. * dk + ... + ik, then Gather on axis a. The
    result dims replace the indexed ones in place, as torch does for adjacent indices. One bool
    mask on the leading dims is `_masked_rows`. Indices separated by a full slice have no translation."""
    x = ctx.tensor("self")
    given = [(axis, i) for axis, i in enumerate(ctx["indices"]) if i is not None]
    if len(given) == 1 and given[0][0] == 0 and given[0][1].dtype == torch.bool:
        return _masked_rows(ctx, x, given[0][1])
    if not given or any(i.dtype not in (torch.int64, torch.int32) for _, i in given):
        raise ctx.unsupported("with a bool mask or non-integer index has no TrainRT translation")
    axes = [axis for axis, _ in given]
    if axes != list(range(axes[0], axes[0] + len(axes))):
        raise ctx.unsupported("with index tensors on non-adjacent dims has no TrainRT translation")
    first, last = axes[0], axes[-1]
    if first == last:
        return ctx.emit("Gather", [x, given[0][1]], axis=first)
    flat = None
    for axis, idx in given:  # Horner's rule over the indexed dims, each index made non-negative
        size = ctx.operand(x.shape[axis], torch.int64)
        i = ctx.cast(idx, torch.int64)
        i = ctx.emit("Where", [ctx.emit("Less", [i, ctx.const(0, torch.int64)]), ctx.emit("Add", [i, size]), i])
        flat = i if flat is None else ctx.emit("Add", [ctx.emit("Mul", [flat, size]), i])
    merged = reshape_to(ctx, x, [*x.shape[:first], math.prod(x.shape[first:last + 1]), *x.shape[last + 1:]])
    return ctx.emit("Gather", [merged, flat], axis=first)


def _masked_rows(ctx: OpContext, x: TensorValue, mask: TensorValue) -> str:
    """x[mask] for a bool mask of x's first m dims: the K selected rows, (K, *x.shape[m:]), in
    row-major order as torch gives them. K depends on the mask's values: NonZero sizes it when
    the step runs, and its symbol (export's unbacked u<k>) is read from the result's dim 0 where a
    later op needs it (BART-family classifiers take each sequence's last <eos> state this way)."""
    m = mask.rank
    flat_mask = reshape_to(ctx, mask, [math.prod(mask.shape)])  # (P,)
    rows = reshape_to(ctx, ctx.emit("NonZero", [flat_mask]), [-1])  # (K,) positions, ascending
    picked = ctx.emit("Gather", [reshape_to(ctx, x, [math.prod(x.shape[:m]), *x.shape[m:]]), rows], axis=0)
    ctx.symbols.add_source(picked, ctx.out.shape)
    return picked


@translates("aten.nonzero.default")
def nonzero(ctx: OpContext) -> str:
    """torch.nonzero(x): the (K, rank) int64 indices of x's nonzero elements, in row-major order;
    ONNX NonZero gives them as (rank, K), hence the Transpose. K depends on x's values: NonZero
    sizes it when the step runs, and its symbol (export's unbacked u<k>) is read from the result's
    dim 0 where a later op needs it (DeBERTa's classifier gathers the rows whose label is >= 0)."""
    x = ctx.tensor("self")
    if x.rank == 0:
        raise ctx.unsupported("of a 0-d tensor has no TrainRT translation")
    indices = ctx.emit("Transpose", [ctx.emit("NonZero", [x])], perm=[1, 0])  # (K, rank)
    ctx.symbols.add_source(indices, ctx.out.shape)
    return indices


@translates("aten.embedding.default")
def embedding(ctx: OpContext) -> str:
    """Rows of the weight: Gather on axis 0. nn.Embedding(padding_idx=p) (aten passes p >= 0, -1
    for none) trains differently, the padding row gets no gradient, which plain Gather cannot say:
    that form is TrainRT's Embedding op, whose gradient skips row p."""
    if ctx["scale_grad_by_freq"] or ctx["sparse"]:
        raise ctx.unsupported("with scale_grad_by_freq or sparse has no TrainRT translation")
    weight, indices = ctx.tensor("weight"), ctx.tensor("indices")
    padding_idx = ctx["padding_idx"]
    if padding_idx is None or padding_idx < 0:
        return ctx.emit("Gather", [weight, indices], axis=0)
    return ctx.emit("Embedding", [weight, indices], padding_idx=int(padding_idx), domain="com.trainrt")


@translates("aten.pad.default", "aten.constant_pad_nd.default")
def constant_pad(ctx: OpContext) -> str:
    """F.pad(x, (left_last, right_last, left_prev, ...), value) in constant mode (the other modes:
    _pad_from_input): per padded dim, a
    Concat with fills of the pad width (a negative pad crops, a Slice). Built from Concat and Slice,
    the gradient is theirs (dX = dY's unpadded part) and symbolic dims stay symbolic."""
    x = ctx.tensor("self")
    mode = ctx.args.get("mode", "constant")
    if mode != "constant":
        return _pad_from_input(ctx, x, list(ctx["pad"]), mode)
    value = ctx.args.get("value")
    value = 0 if value is None else value
    pads = list(ctx["pad"])
    y, shape = x.name, list(x.shape)
    for k in range(len(pads) // 2):
        axis, left, right = x.rank - 1 - k, pads[2 * k], pads[2 * k + 1]
        if not (is_static(left) and is_static(right)):
            raise ctx.unsupported("with symbolic pad widths has no TrainRT translation")
        left, right = int(left), int(right)
        if left < 0 or right < 0:
            end = shape[axis] + right if right < 0 else shape[axis]
            y = ctx.emit("Slice", [y, ctx.ints([max(-left, 0)]), ctx.ints([end]), ctx.ints([axis])])
            shape[axis] = end - max(-left, 0)
        parts = []
        for width, at_end in ((max(left, 0), False), (max(right, 0), True)):
            if width:
                fill_shape = shape[:axis] + [width] + shape[axis + 1:]
                parts.append((at_end, ctx.emit("ConstantOfShape", [ctx.ints(fill_shape)],
                                               value=fill_value(value, x.dtype))))
        if parts:
            y = ctx.emit("Concat", [p for e, p in parts if not e] + [y] + [p for e, p in parts if e], axis=axis)
            shape[axis] = shape[axis] + max(left, 0) + max(right, 0)
    return y


# torch's padding modes and ONNX Pad's
_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_from_input(ctx: OpContext, x, pads: list, mode: str) -> str:
    """F.pad in reflect / replicate / circular mode: ONNX Pad with the mode (edge, wrap), its pads
    reordered from torch's (last dim's left, right, the previous dim's, ...) to ONNX's (every dim's
    begin, then every dim's end). The engine's Pad and its gradient take every mode."""
    if mode not in _PAD_MODES:
        raise ctx.unsupported(f"with mode '{mode}' has no TrainRT translation")
    if not all(is_static(p) for p in pads):
        raise ctx.unsupported("with symbolic pad widths has no TrainRT translation")
    begin, end = [0] * x.rank, [0] * x.rank
    for k in range(len(pads) // 2):
        begin[x.rank - 1 - k], end[x.rank - 1 - k] = int(pads[2 * k]), int(pads[2 * k + 1])
    return ctx.emit("Pad", [x.name, ctx.ints(begin + end)], mode=_PAD_MODES[mode])


@translates("aten.reflection_pad1d.default", "aten.reflection_pad2d.default", "aten.reflection_pad3d.default")
def reflection_pad(ctx: OpContext) -> str:
    return _pad_from_input(ctx, ctx.tensor("self"), list(ctx["padding"]), "reflect")


@translates("aten.replication_pad1d.default", "aten.replication_pad2d.default", "aten.replication_pad3d.default")
def replication_pad(ctx: OpContext) -> str:
    return _pad_from_input(ctx, ctx.tensor("self"), list(ctx["padding"]), "replicate")


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
    return ctx.emit("GatherElements", [x, ctx.tensor("index")], axis=dim_axis(ctx["dim"], x.rank))


def _scatter_range(ctx: OpContext, base: TensorValue, src: str, axis: int, start, end) -> str:
    """base with base[start:end] along axis replaced by src (step 1), as Concat(base[:start], src,
    base[end:]): Python slice bounds (negative counts back), and Slice and Concat have gradient
    rules, so both base and src train. Parts that are statically empty are left out."""
    parts = []
    if not (is_static(start) and int(start) == 0):
        parts.append(ctx.emit("Slice", [base, ctx.ints([0]), ctx.ints([start]), ctx.ints([axis])]))
    parts.append(src)
    size = base.shape[axis]
    to_end = is_static(end) and (int(end) >= 2**62 or (is_static(size) and int(end) >= int(size)))
    if not to_end:
        parts.append(ctx.emit("Slice", [base, ctx.ints([end]), ctx.ints([INT64_MAX]), ctx.ints([axis])]))
    return parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, axis=axis)


def _scatter_strided(ctx: OpContext, base: TensorValue, src: str, axis: int, start: int, step: int) -> str:
    """base with base[start::step] along axis replaced by src (static start >= 0, step > 1): each
    position p of the axis takes src[(p - start) / step] where p >= start and step divides
    p - start and that index is within src, else base[p]: Where over a Gather of src, whose
    gradient sums into src, as Where's does into base."""
    size = ctx.operand(base.shape[axis], torch.int64)
    count = ctx.operand(ctx.tensor("src").shape[axis], torch.int64)
    zero = ctx.const(0, torch.int64)
    offset = ctx.emit("Sub", [ctx.emit("Range", [zero, size, ctx.const(1, torch.int64)]), ctx.const(start, torch.int64)])
    index = ctx.emit("Div", [offset, ctx.const(step, torch.int64)])  # (size,), exact where it is a hit
    hit = ctx.emit("And", [ctx.emit("GreaterOrEqual", [offset, zero]),
                           ctx.emit("Equal", [ctx.emit("Sub", [offset, ctx.emit("Mul", [index, ctx.const(step, torch.int64)])]),
                                              zero])])
    hit = ctx.emit("And", [hit, ctx.emit("Less", [index, count])])
    gathered = ctx.emit("Gather", [src, ctx.emit("Where", [hit, index, zero])], axis=axis)
    trailing = base.rank - 1 - axis
    if trailing:
        hit = ctx.emit("Unsqueeze", [hit, ctx.ints(range(1, trailing + 1))])
    return ctx.emit("Where", [hit, gathered, base])


@translates("aten.slice_scatter.default")
def slice_scatter(ctx: OpContext) -> str:
    """The functional form of `x[..., start:end] = src` (T5's shift of labels to decoder inputs),
    and of `x[..., start::step] = src` (Qwen3.5's interleaved heads)."""
    base = ctx.tensor("self")
    step = ctx["step"]
    start = 0 if ctx["start"] is None else ctx["start"]
    end = INT64_MAX if ctx["end"] is None else ctx["end"]
    src = ctx.cast(ctx.tensor("src"), base.dtype)
    axis = dim_axis(ctx["dim"], base.rank)
    if any(is_static(d) and int(d) == 0 for d in ctx.tensor("src").shape):
        return base.name  # writes nothing (Qwen3.5's interleave of a tiny config's empty part)
    if step == 1:
        return _scatter_range(ctx, base, src, axis, start, end)
    if not (is_static(start) and int(start) >= 0 and is_static(step) and int(step) > 1):
        raise ctx.unsupported(f"with start={start}, step={step} has no TrainRT translation (static start >= 0)")
    return _scatter_strided(ctx, base, src, axis, int(start), int(step))


@translates("aten.select_scatter.default")
def select_scatter(ctx: OpContext) -> str:
    """The functional form of `x[..., index] = src`: src (x's shape without the axis) unsqueezed
    and written over the one-wide slice [index, index + 1); index -1 runs to the end."""
    base = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], base.rank)
    index = ctx["index"]
    end = INT64_MAX if is_static(index) and int(index) == -1 else index + 1
    src = ctx.emit("Unsqueeze", [ctx.cast(ctx.tensor("src"), base.dtype), ctx.ints([axis])])
    return _scatter_range(ctx, base, src, axis, index, end)


@translates("aten.repeat.default")
def repeat(ctx: OpContext) -> str:
    """x.repeat(*repeats): ONNX Tile (its gradient sums the copies back). With more repeats than x
    has dims, x first gains leading dims of 1, as torch does ((3,) .repeat(2, 2) is (2, 6))."""
    x = ctx.tensor("self")
    repeats = list(ctx["repeats"])
    extra = len(repeats) - x.rank
    y = ctx.emit("Unsqueeze", [x, ctx.ints(range(extra))]) if extra > 0 else x.name
    if all(is_static(r) and int(r) == 1 for r in repeats):
        return y
    return ctx.emit("Tile", [y, ctx.ints(repeats)])


@translates("aten.repeat_interleave.self_int")
def repeat_interleave(ctx: OpContext) -> str:
    """x.repeat_interleave(r, dim): each element r times in a row along dim, as x (..., d, ...)
    unsqueezed after dim to (..., d, 1, ...), expanded to (..., d, r, ...) and reshaped to
    (..., d * r, ...); dim None flattens x first. The gradient is Expand's (sums over the copies)."""
    x = ctx.tensor("self")
    r, dim = ctx["repeats"], ctx["dim"]
    shape = list(x.shape)
    y = x.name
    if dim is None:
        y, shape, axis = reshape_to(ctx, x, [math.prod(shape)]), [math.prod(shape)], 0
    else:
        axis = dim_axis(dim, x.rank)
    y = ctx.emit("Unsqueeze", [y, ctx.ints([axis + 1])])
    y = ctx.emit("Expand", [y, ctx.ints([*shape[:axis + 1], r, *shape[axis + 1:]])])
    return reshape_to(ctx, y, ctx.out.shape)


@translates("aten.unfold.default")
def unfold(ctx: OpContext) -> str:
    """Tensor.unfold(dim, size, step): the W = (L - size) // step + 1 windows of `size` along dim,
    the window's elements as a new last dim. A Gather of x along dim at
        index[w, i] = w * step + i                    (W, size)
    gives (..., W, size, ...); the size axis then moves last. Gather's gradient adds each window's
    dY back into x, overlapping windows summing, as torch's unfold backward does."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dimension"], x.rank)
    size, step = int(ctx["size"]), int(ctx["step"])
    if x.rank == 0:
        raise ctx.unsupported("of a 0-d tensor has no TrainRT translation")
    windows = ctx.out.shape[axis]
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    starts = ctx.emit("Mul", [ctx.emit("Range", [zero, ctx.operand(windows, torch.int64), one]),
                              ctx.const(step, torch.int64)])  # (W,)
    offsets = ctx.emit("Range", [zero, ctx.const(size, torch.int64), one])  # (size,)
    index = ctx.emit("Add", [ctx.emit("Unsqueeze", [starts, ctx.ints([1])]), offsets])  # (W, size)
    gathered = ctx.emit("Gather", [x, index], axis=axis)  # (..., W, size, ...)
    if axis == x.rank - 1:
        return gathered
    perm = [d for d in range(x.rank + 1) if d != axis + 1] + [axis + 1]
    return ctx.emit("Transpose", [gathered], perm=perm)
