"""Complex tensors, as rotary embeddings written with them use them (Llama 4, DeepSeek-V2): the
engine has no complex dtype, so a complex tensor of shape S is carried as a real one of shape
S + (2,), (real, imaginary) on the last axis, in the matching real dtype (complex64 as float32).
Its TensorValue keeps the complex dtype and shape S, so the rest of the capture reads torch's view
of it; only the translations here, which the translator picks for every node that reads or makes a
complex tensor, know the layout. Every op they emit is real and differentiable, so gradients flow
through the rotation as torch's do.

    freqs_cis = torch.polar(ones, freqs)                  # Concat(cos(freqs), sin(freqs)) on a new last axis
    q_ = torch.view_as_complex(q.reshape(..., -1, 2))     # the same real tensor
    out = torch.view_as_real(q_ * freqs_cis)              # (ac - bd, ad + bc), the same real tensor
    y = torch.fft.fftn(x, dim=(1, 2)).real                # ONNX DFT along each axis, then part 0 (FNet)

Axes given against the complex shape S are the same axes of the real layout (the pair axis comes
after all of them) once made non-negative against S's rank.
"""

from __future__ import annotations

from typing import Callable

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import dim_axis, slice_

COMPLEX_OPS: dict[str, Callable[[OpContext], object]] = {}


def translates_complex(*names: str):
    def register(fn):
        for name in names:
            COMPLEX_OPS[name] = fn
        return fn

    return register


def touches_complex(node: torch.fx.Node) -> bool:
    """Whether the FX node makes or reads a complex tensor."""
    def complex_(v) -> bool:
        if isinstance(v, (list, tuple)):
            return any(complex_(x) for x in v)
        return isinstance(v, torch.Tensor) and v.dtype.is_complex

    return complex_(node.meta.get("val")) or any(complex_(a.meta.get("val")) for a in node.all_input_nodes)


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype.to_real() if dtype.is_complex else dtype


def _parts(ctx: OpContext, z: TensorValue) -> tuple[str, str]:
    """(real, imaginary) of a complex value, each of shape S + (1,)."""
    return tuple(ctx.emit("Split", [z.name, ctx.ints([1, 1])], 2, axis=-1))


def _pair(ctx: OpContext, re: str, im: str) -> str:
    return ctx.emit("Concat", [re, im], axis=-1)


@translates_complex("aten.view_as_complex.default", "aten.view_as_real.default", "aten.alias.default",
                    "aten.clone.default", "aten.contiguous.default")
def same_layout(ctx: OpContext) -> str:
    """Views between a real (..., 2) tensor and a complex one are the real tensor itself."""
    return ctx.tensor("self").name


@translates_complex("aten.to.dtype", "aten.to.dtype_layout", "aten._to_copy.default", "aten.to.device")
def to(ctx: OpContext) -> str:
    """complex64 <-> complex128 is a Cast of both parts, a real tensor becomes (x, 0); a complex to a
    real dtype is refused (torch warns it drops the imaginary part: .real says it)."""
    x = ctx.tensor("self")
    if not ctx.out.dtype.is_complex:
        raise ctx.unsupported("from a complex to a real dtype has no TrainRT translation (take .real)")
    real = _real_dtype(ctx.out.dtype)
    if not x.dtype.is_complex:
        re = ctx.emit("Unsqueeze", [ctx.cast(x, real), ctx.ints([-1])])
        return _pair(ctx, re, ctx.emit("Mul", [re, ctx.const(0.0, real)]))
    return ctx.cast_to(x.name, _real_dtype(x.dtype), real)


@translates_complex("aten.real.default", "aten.imag.default")
def part(ctx: OpContext) -> str:
    """z.real, z.imag: part 0 or 1 of the last axis."""
    z = ctx.tensor("self")
    index = 1 if ctx.node.target == torch.ops.aten.imag.default else 0
    return ctx.emit("Squeeze", [ctx.emit("Slice", [z.name, ctx.ints([index]), ctx.ints([index + 1]), ctx.ints([-1])]),
                                ctx.ints([-1])])


def _pair_layout(ctx: OpContext, x: TensorValue, real: torch.dtype) -> str:
    """x as ONNX DFT's input: (..., 2) for a complex x, (..., 1) for a real one."""
    if x.dtype.is_complex:
        return ctx.cast_to(x.name, _real_dtype(x.dtype), real)
    return ctx.emit("Unsqueeze", [ctx.cast(x, real), ctx.ints([-1])])


def _fft(ctx: OpContext, dims, inverse: bool) -> str:
    """torch.fft.fft / fftn / ifft / ifftn without `s` / `n`: one ONNX DFT per axis (opset 20: the
    axis an input), complex out; norm "backward" (the default), "forward" or "ortho" as torch scales."""
    x = ctx.tensor("self")
    if ctx.args.get("s") is not None or ctx.args.get("n") is not None:
        raise ctx.unsupported("with a signal size (s / n) has no TrainRT translation")
    real = _real_dtype(ctx.out.dtype)
    axes = [dim_axis(d, x.rank) for d in (dims if dims is not None else range(x.rank))]
    y = _pair_layout(ctx, x, real)
    for axis in axes:
        y = ctx.emit("DFT", [y, None, ctx.const(axis, torch.int64)], inverse=int(inverse), onesided=0)
    norm = ctx.args.get("norm") or "backward"
    count = 1
    for axis in axes:
        count = count * x.shape[axis]
    if norm == "backward":  # forward unscaled; the inverse's 1/n is ONNX DFT's own
        return y
    scale = ctx.emit("Sqrt", [ctx.operand(count, real)]) if norm == "ortho" else ctx.operand(count, real)
    if norm == "ortho" and inverse:  # ONNX's inverse divided by n already: times sqrt(n)
        return ctx.emit("Mul", [y, scale])
    if norm == "forward" and inverse:  # torch's forward-normed inverse is unscaled
        return ctx.emit("Mul", [y, scale])
    return ctx.emit("Div", [y, scale])


@translates_complex("aten.fft_fftn.default", "aten.fft_ifftn.default")
def fftn(ctx: OpContext) -> str:
    return _fft(ctx, ctx["dim"], inverse=ctx.node.target == torch.ops.aten.fft_ifftn.default)


@translates_complex("aten.fft_fft.default", "aten.fft_ifft.default")
def fft(ctx: OpContext) -> str:
    return _fft(ctx, [ctx["dim"]], inverse=ctx.node.target == torch.ops.aten.fft_ifft.default)


@translates_complex("aten.polar.default")
def polar(ctx: OpContext) -> str:
    """abs * (cos(angle), sin(angle))."""
    magnitude, angle = ctx.tensor("abs"), ctx.tensor("angle")
    re = ctx.emit("Mul", [magnitude, ctx.emit("Cos", [angle])])
    im = ctx.emit("Mul", [magnitude, ctx.emit("Sin", [angle])])
    return _pair(ctx, ctx.emit("Unsqueeze", [re, ctx.ints([-1])]), ctx.emit("Unsqueeze", [im, ctx.ints([-1])]))


@translates_complex("aten.mul.Tensor", "aten.mul.Scalar")
def mul(ctx: OpContext) -> str:
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i; a real tensor or number scales both parts."""
    x, y = ctx["self"], ctx["other"]
    complex_x = isinstance(x, TensorValue) and x.dtype.is_complex
    complex_y = isinstance(y, TensorValue) and y.dtype.is_complex
    if complex_x and complex_y:
        (a, b), (c, d) = _parts(ctx, x), _parts(ctx, y)
        re = ctx.emit("Sub", [ctx.emit("Mul", [a, c]), ctx.emit("Mul", [b, d])])
        im = ctx.emit("Add", [ctx.emit("Mul", [a, d]), ctx.emit("Mul", [b, c])])
        return _pair(ctx, re, im)
    z, r = (x, y) if complex_x else (y, x)
    real = _real_dtype(ctx.out.dtype)
    if isinstance(r, TensorValue):
        scale = ctx.emit("Unsqueeze", [ctx.cast(r, real), ctx.ints([-1])])
    elif isinstance(r, complex):
        raise ctx.unsupported("by a Python complex number has no TrainRT translation")
    else:
        scale = ctx.const(float(r), real)
    return ctx.emit("Mul", [ctx.cast_to(z.name, _real_dtype(z.dtype), real), scale])


@translates_complex("aten.unsqueeze.default")
def unsqueeze(ctx: OpContext) -> str:
    z = ctx.tensor("self")
    return ctx.emit("Unsqueeze", [z.name, ctx.ints([dim_axis(ctx["dim"], z.rank + 1)])])


# The real translation serves: it makes the axis non-negative against the complex rank.
translates_complex("aten.slice.Tensor")(slice_)


@translates_complex("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def reshape(ctx: OpContext) -> str:
    """To the output's complex shape, the pair axis kept last."""
    z = ctx.tensor("self")
    return ctx.emit("Reshape", [z.name, ctx.ints([*ctx.out.shape, 2])])
