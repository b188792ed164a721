"""Convolutions: the ATen forms of nn.Conv1d/2d/3d -> ONNX Conv with explicit pads.

torch.export's training IR records nn.Conv2d as aten.conv2d.default (numeric padding) or
aten.conv2d.padding (padding='same' or 'valid'); functionalized graphs and F.conv* callers may carry
aten.convolution.default. torch pads numeric padding p on both sides of an axis; 'same' (stride 1
only) pads dilation * (kernel - 1) in total, the odd pixel at the end (ONNX SAME_UPPER), and is
emitted as explicit pads too so the engine never re-derives torch's rule. An unbatched input
(C, D...) is given a batch of one and has it removed again.

Not translated, with the reason in the UnsupportedATenOp: transposed convolutions (no ConvTranspose
in the engine yet) and nn.Conv*d's padding modes other than 'zeros' ('reflect', 'replicate' and
'circular' reach the graph as aten.pad.default before the convolution, which translates in constant
mode only: see ops_shape.constant_pad).
"""

from __future__ import annotations

from trainrt.capture.context import OpContext
from trainrt.capture.registry import translates


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
