"""Convolutions: the ATen forms of nn.Conv1d/2d/3d -> ONNX Conv with explicit pads.

torch.export's training IR records nn.Conv2d as aten.conv2d.default (numeric padding) or
aten.conv2d.padding (padding='same' or 'valid'); functionalized graphs and F.conv* callers may carry
aten.convolution.default. torch pads numeric padding p on both sides of an axis; 'same' (stride 1
only) pads dilation * (kernel - 1) in total, the odd pixel at the end (ONNX SAME_UPPER), and is
emitted as explicit pads too so the engine never re-derives torch's rule. An unbatched input
(C, D...) is given a batch of one and has it removed again. nn.Unfold (aten.im2col) is a Conv too,
with a constant one-hot weight; nn.Fold (aten.col2im), its transpose, a ScatterElements that adds
each column entry to the pixel it came from.

Not translated, with the reason in the UnsupportedATenOp: transposed convolutions (no ConvTranspose
in the engine yet) and nn.Conv*d's padding modes other than 'zeros' ('reflect', 'replicate' and
'circular' reach the graph as aten.pad.default before the convolution, which translates in constant
mode only: see ops_shape.constant_pad).
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext
from trainrt.capture.onnx_builder import fill_value
from trainrt.capture.ops_shape import reshape_to
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _per_axis(ctx: OpContext, name: str, k: int) -> list[int]:
    """A stride / padding / dilation argument as k ints (torch accepts one value for every axis)."""
    v = [int(e) for e in ctx[name]]
    if len(v) == 1:
        v = v * k
    if len(v) != k:
        raise ctx.unsupported(f"has {name}={v} for a {k}-D convolution")
    return v


def _conv(ctx: OpContext, pads_of) -> str:
    """Conv of ctx's input, weight and bias; pads_of(kernel, dilations) gives ONNX pads (begins, ends)."""
    x, w, b = ctx.tensor("input"), ctx.tensor("weight"), ctx["bias"]
    k = w.rank - 2
    if x.rank not in (k + 1, k + 2):
        raise ctx.unsupported(f"has input of rank {x.rank} for weight of shape {tuple(w.shape)}")
    dilations = _per_axis(ctx, "dilation", k)
    name = x.name if x.rank == k + 2 else ctx.emit("Unsqueeze", [x, ctx.ints([0])])
    y = ctx.emit("Conv", [name, w, b], strides=_per_axis(ctx, "stride", k), dilations=dilations,
                 pads=pads_of([int(s) for s in w.shape[2:]], dilations), group=int(ctx["groups"]))
    return y if x.rank == k + 2 else ctx.emit("Squeeze", [y, ctx.ints([0])])


@translates("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")
def conv(ctx: OpContext) -> str:
    k = ctx.tensor("weight").rank - 2
    return _conv(ctx, lambda kernel, dilations: _per_axis(ctx, "padding", k) * 2)


@translates("aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding")
def conv_padding_mode(ctx: OpContext) -> str:
    """padding='valid' (none) or 'same' (torch's rule, see the module docstring)."""
    mode = ctx["padding"]
    if mode == "valid":
        return _conv(ctx, lambda kernel, dilations: [0] * (2 * len(kernel)))
    if mode != "same":
        raise ctx.unsupported(f"has padding='{mode}' (torch accepts 'same' and 'valid')")

    def same(kernel, dilations):
        total = [d * (s - 1) for s, d in zip(kernel, dilations)]
        return [t // 2 for t in total] + [t - t // 2 for t in total]

    return _conv(ctx, same)


@translates("aten.convolution.default")
def convolution(ctx: OpContext) -> str:
    if ctx["transposed"]:
        raise ctx.unsupported("is a transposed convolution (nn.ConvTranspose*d), which TrainRT does not "
                              "support yet (no ConvTranspose op)")
    k = ctx.tensor("weight").rank - 2
    return _conv(ctx, lambda kernel, dilations: _per_axis(ctx, "padding", k) * 2)


@translates("aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input")
def conv_transpose(ctx: OpContext) -> str:
    raise ctx.unsupported("is a transposed convolution (nn.ConvTranspose*d), which TrainRT does not support yet "
                          "(no ConvTranspose op)")


@translates("aten.im2col.default")
def im2col(ctx: OpContext) -> str:
    """nn.Unfold / F.unfold: (N, C, H, W) -> (N, C * kh * kw, L), each column one window, channel
    major then window position. A Conv with a constant one-hot weight, one group per channel: output
    channel c * kh * kw + i * kw + j reads x[c] at window offset (i, j); dilation, padding and stride
    are the Conv's own, and so is the gradient (ConvGrad), torch's col2im."""
    x = ctx.tensor("self")
    unbatched = x.rank == 3
    name = ctx.emit("Unsqueeze", [x, ctx.ints([0])]) if unbatched else x.name
    channels = x.shape[-3]
    if not is_static(channels):
        raise ctx.unsupported("with a symbolic channel count has no TrainRT translation")
    c, (kh, kw) = int(channels), list(ctx["kernel_size"])
    window = kh * kw
    weight = torch.zeros(c * window, 1, kh, kw, dtype=x.dtype)
    for k in range(window):
        weight[k::window, 0, k // kw, k % kw] = 1
    w = ctx.b.add_initializer(weight, f"{ctx.node.name}/one_hot")
    ph, pw = list(ctx["padding"])
    cols = ctx.emit("Conv", [name, w], kernel_shape=[kh, kw], group=c, dilations=list(ctx["dilation"]),
                    pads=[ph, pw, ph, pw], strides=list(ctx["stride"]))  # (N, C * kh * kw, H', W')
    flat = ctx.emit("Reshape", [cols, ctx.ints([0, c * window, -1])])  # (N, C * kh * kw, L); 0 keeps N
    return ctx.emit("Squeeze", [flat, ctx.ints([0])]) if unbatched else flat


@translates("aten.col2im.default")
def col2im(ctx: OpContext) -> str:
    """nn.Fold / F.fold: (N, C * kh * kw, L) -> (N, C, H, W), the transpose of im2col: each column
    entry added to the pixel its window read (overlapping windows sum; entries that fall in the
    padding are dropped). The target of each entry (k = i * kw + j, l) is known at capture, so
    this is ScatterElements(zeros (N, C, H * W + 1), target, cols, axis=2, reduction='add') with
    padding entries sent to the extra last slot, which a Slice drops. Its gradient is the
    engine's: dCols = GatherElements(dY, target), im2col of dY (0 for padding), as torch's."""
    x = ctx.tensor("self")
    unbatched = x.rank == 2
    name = ctx.emit("Unsqueeze", [x, ctx.ints([0])]) if unbatched else x.name
    if not all(is_static(v) for v in ctx["output_size"]):
        raise ctx.unsupported("with a symbolic output_size has no TrainRT translation")
    height, width = (int(v) for v in ctx["output_size"])
    (kh, kw), (dh, dw) = list(ctx["kernel_size"]), list(ctx["dilation"])
    (ph, pw), (sh, sw) = list(ctx["padding"]), list(ctx["stride"])
    rows = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1  # windows down and across: L = rows * cols
    cols = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    # target[k, l]: the flat pixel of window l = (r, c) at kernel offset k = (i, j); H * W in the padding.
    i, j = torch.arange(kh * kw).div(kw, rounding_mode="floor"), torch.arange(kh * kw) % kw
    r, c = torch.arange(rows * cols).div(cols, rounding_mode="floor"), torch.arange(rows * cols) % cols
    h = r[None, :] * sh - ph + i[:, None] * dh  # (kh * kw, L)
    w = c[None, :] * sw - pw + j[:, None] * dw
    inside = (h >= 0) & (h < height) & (w >= 0) & (w < width)
    target = torch.where(inside, h * width + w, height * width).reshape(1, 1, -1)  # (1, 1, kh * kw * L)
    out = ctx.out.shape if not unbatched else (1, *ctx.out.shape)  # (N, C, H, W)
    n, channels = out[0], out[1]
    entries = reshape_to(ctx, name, [n, channels, target.shape[-1]])  # (N, C, kh * kw * L): row c * kh * kw + k
    index = ctx.emit("Expand", [ctx.b.add_initializer(target, f"{ctx.node.name}/target"), ctx.emit("Shape", [entries])])
    zeros = ctx.emit("ConstantOfShape", [ctx.ints([n, channels, height * width + 1])], value=fill_value(0, x.dtype))
    summed = ctx.emit("ScatterElements", [zeros, index, entries], axis=2, reduction="add")  # (N, C, H * W + 1)
    pixels = ctx.emit("Slice", [summed, ctx.ints([0]), ctx.ints([height * width]), ctx.ints([2])])
    y = reshape_to(ctx, pixels, out)
    return ctx.emit("Squeeze", [y, ctx.ints([0])]) if unbatched else y
