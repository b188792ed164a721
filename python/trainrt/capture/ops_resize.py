"""Upsampling (F.interpolate, nn.Upsample) as ONNX Resize over the spatial axes (axes attribute).

torch's modes map to Resize's attributes so that each output pixel reads the pixels torch reads
(aten/src/ATen/native/UpSample.h, area_pixel_compute_source_index):
    nearest          (Gather, below)                 src = floor(dst * in / out)
    nearest-exact    (Gather, below)                 src = floor((dst + 0.5) * in / out)
    linear, bilinear, trilinear, bicubic (A = -0.75)
                     half_pixel                      src = (dst + 0.5) * in / out - 0.5, edge clamped
                     align_corners=True: align_corners, src = dst * (in - 1) / (out - 1)
    antialias=True   antialias, exclude_outside, and A = -0.5 for bicubic (torch's PIL filters)
torch uses the scale factor it was given (1 / scale) where it has one, else in / out; Resize does
the same with scales versus sizes, so the one torch got is passed. align_corners ignores the scale
in torch: sizes then. mode="area" is adaptive_avg_pool (ops_pool.py).

Nearest picks a pixel by a floor, so where dst * in / out is an integer exactly, torch's f32
product with its rounded 1 / scale and Resize's f64 quotient can floor to neighbours (scale 1.7,
dst 17: torch reads 10, Resize 9). Nearest is therefore a Gather per axis of the indices torch
computes, in its f32 arithmetic: constants where the dims are static, else computed in the graph.
"""

from __future__ import annotations

import re

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _spatial(ctx: OpContext) -> int:
    return int(re.search(r"(\d)d", str(ctx.node.target)).group(1))


def _input(ctx: OpContext) -> tuple[TensorValue, int]:
    """(x, number of spatial dims) of an upsampling op; x must be (N, C, spatial)."""
    x, dims = ctx.tensor("input"), _spatial(ctx)
    if x.rank != dims + 2:
        raise ctx.unsupported(f"expects an input of {dims + 2} dims (N, C, spatial), got shape {x.shape}")
    return x, dims


def _torch_scales(ctx: OpContext, dims: int) -> list:
    """The scale factor torch got per spatial axis (None where it computes in / out): the .vec forms'
    scale_factors, or the .default forms' scales_d / scales_h / scales_w (scales, 1-D)."""
    args = ctx.args
    scales = args.get("scale_factors") or [args.get(k) for k in ("scales_d", "scales_h", "scales_w", "scales") if k in args]
    return [scales[i] if i < len(scales) else None for i in range(dims)]


def _resize(ctx: OpContext, mode: str, coordinates: str, **attrs) -> str:
    x, dims = _input(ctx)
    scales = _torch_scales(ctx, dims)
    axes = list(range(2, dims + 2))
    if all(s is not None for s in scales) and coordinates != "align_corners":
        inputs = [x, None, ctx.b.const([float(s) for s in scales], torch.float32)]
    else:
        inputs = [x, None, None, ctx.ints(ctx.out.shape[2:])]  # the output's spatial dims, torch's rounding
    return ctx.emit("Resize", inputs, mode=mode, coordinate_transformation_mode=coordinates, axes=axes, **attrs)


def _static_nearest_index(n: int, m: int, scale, exact: bool, shortcuts: bool) -> list[int]:
    """torch's source indices for an axis of n pixels resized to m (see _symbolic_nearest_index)."""
    if shortcuts and m == n:
        return list(range(m))
    if shortcuts and m == 2 * n:
        return [o >> 1 for o in range(m)]
    f32 = torch.float32
    ratio = (torch.tensor(1.0 / float(scale), dtype=f32) if scale is not None
             else torch.tensor(float(n), dtype=f32) / torch.tensor(float(m), dtype=f32))
    position = torch.arange(m, dtype=torch.float32) + (0.5 if exact else 0.0)
    return torch.clamp(torch.floor(position * ratio).to(torch.int64), max=n - 1).tolist()


def _symbolic_nearest_index(ctx: OpContext, n, m, scale, exact: bool, shortcuts: bool) -> str:
    """torch's source indices computed in the graph, in its f32 arithmetic (UpSample.h:
    nearest_idx, nearest_neighbor_[exact_]compute_source_index):
        src = min(floor(dst * r), n - 1)            r = f32(1 / scale), or f32(n) / f32(m)
        src = min(floor((dst + 0.5) * r), n - 1)    nearest-exact
    and, where torch's kernel takes them (nearest of 2 spatial dims in torch 2.13; its 1-D and 3-D
    kernels do not), the shortcuts dst when m == n and dst / 2 when m == 2 n."""
    f32, i64 = torch.float32, torch.int64
    n_i, m_i = ctx.operand(n, i64), ctx.operand(m, i64)
    dst = ctx.emit("Range", [ctx.const(0, i64), m_i, ctx.const(1, i64)])
    position = ctx.cast_to(dst, i64, f32)
    if exact:
        position = ctx.emit("Add", [position, ctx.const(0.5, f32)])
    if scale is not None:
        ratio = ctx.const(float(torch.tensor(1.0 / float(scale), dtype=f32)), f32)
    else:
        ratio = ctx.emit("Div", [ctx.cast_to(n_i, i64, f32), ctx.cast_to(m_i, i64, f32)])
    src = ctx.cast_to(ctx.emit("Floor", [ctx.emit("Mul", [position, ratio])]), f32, i64)
    src = ctx.emit("Min", [src, ctx.emit("Sub", [n_i, ctx.const(1, i64)])])
    if not shortcuts:
        return src
    halved = ctx.emit("Div", [dst, ctx.const(2, i64)])
    doubled = ctx.emit("Equal", [m_i, ctx.emit("Mul", [n_i, ctx.const(2, i64)])])
    src = ctx.emit("Where", [doubled, halved, src])
    return ctx.emit("Where", [ctx.emit("Equal", [m_i, n_i]), dst, src])


def _nearest(ctx: OpContext, exact: bool) -> str:
    """Nearest as a Gather per spatial axis of the source indices torch computes."""
    x, dims = _input(ctx)
    y = x.name
    shortcuts = dims == 2 and not exact
    for i, (n, m, scale) in enumerate(zip(x.shape[2:], ctx.out.shape[2:], _torch_scales(ctx, dims))):
        if is_static(n) and is_static(m):
            index = _static_nearest_index(int(n), int(m), scale, exact, shortcuts)
            if index == list(range(int(n))):
                continue
            index = ctx.b.const(index, torch.int64)
        else:
            index = _symbolic_nearest_index(ctx, n, m, scale, exact, shortcuts)
        y = ctx.emit("Gather", [y, index], axis=2 + i)
    return y if y != x.name else ctx.emit("Identity", [x])


@translates("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec", "aten.upsample_nearest3d.vec",
            "aten.upsample_nearest1d.default", "aten.upsample_nearest2d.default", "aten.upsample_nearest3d.default")
def upsample_nearest(ctx: OpContext) -> str:
    return _nearest(ctx, exact=False)


@translates("aten._upsample_nearest_exact1d.vec", "aten._upsample_nearest_exact2d.vec",
            "aten._upsample_nearest_exact3d.vec", "aten._upsample_nearest_exact1d.default",
            "aten._upsample_nearest_exact2d.default", "aten._upsample_nearest_exact3d.default")
def upsample_nearest_exact(ctx: OpContext) -> str:
    return _nearest(ctx, exact=True)


def _coordinates(ctx: OpContext) -> str:
    return "align_corners" if ctx.args.get("align_corners") else "half_pixel"


@translates("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec", "aten.upsample_trilinear3d.vec",
            "aten.upsample_linear1d.default", "aten.upsample_bilinear2d.default",
            "aten.upsample_trilinear3d.default")
def upsample_linear(ctx: OpContext) -> str:
    return _resize(ctx, "linear", _coordinates(ctx))


@translates("aten.upsample_bicubic2d.vec", "aten.upsample_bicubic2d.default")
def upsample_bicubic(ctx: OpContext) -> str:
    return _resize(ctx, "cubic", _coordinates(ctx), cubic_coeff_a=-0.75)


@translates("aten._upsample_bilinear2d_aa.vec", "aten._upsample_bilinear2d_aa.default")
def upsample_bilinear_antialias(ctx: OpContext) -> str:
    return _resize(ctx, "linear", _coordinates(ctx), antialias=1, exclude_outside=1)


@translates("aten._upsample_bicubic2d_aa.vec", "aten._upsample_bicubic2d_aa.default")
def upsample_bicubic_antialias(ctx: OpContext) -> str:
    return _resize(ctx, "cubic", _coordinates(ctx), antialias=1, exclude_outside=1, cubic_coeff_a=-0.5)
