"""Pooling: max_pool / avg_pool / adaptive pools of 1, 2 and 3 spatial dims as ONNX MaxPool,
AveragePool, GlobalMaxPool and GlobalAveragePool (each with a fused gradient in the engine).

torch's arguments map one to one (torch.nn.MaxPool2d / AvgPool2d docs): kernel_size, stride (empty:
the kernel size), padding on both sides, dilation, ceil_mode, count_include_pad. torch accepts an
input without the batch dim ((C, H, W) for 2-D); ONNX wants (N, C, H, W), so such inputs are given
a batch of one and it is dropped again. An adaptive pool is a global pool for an output of ones,
and a plain pool (kernel = stride = input / output) when every input extent divides evenly.
"""

from __future__ import annotations

import re

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _spatial_dims(ctx: OpContext) -> int:
    """The number of spatial dims, from the op's name (max_pool2d_with_indices -> 2)."""
    return int(re.search(r"(\d)d", str(ctx.node.target).split(".")[1]).group(1))


def _per_dim(value, dims: int) -> list[int]:
    """An int or a list of one or `dims` ints as `dims` ints."""
    values = [value] if isinstance(value, int) else list(value)
    return [int(v) for v in (values * dims if len(values) == 1 else values)]


def _pool(ctx: OpContext, op: str, dims: int, num_outputs: int = 1, **attrs) -> str:
    """Emits `op` over the input, adding and dropping a batch of one for unbatched inputs."""
    x = ctx.tensor("self")
    if x.rank not in (dims + 1, dims + 2):
        raise ctx.unsupported(f"expects an input of {dims + 1} or {dims + 2} dims, got shape {x.shape}")
    unbatched = x.rank == dims + 1
    name = ctx.emit("Unsqueeze", [x, ctx.ints([0])]) if unbatched else x.name
    y = ctx.emit(op, [name], num_outputs, **attrs)
    y = y if num_outputs == 1 else y[0]
    return ctx.emit("Squeeze", [y, ctx.ints([0])]) if unbatched else y


def _window_attrs(ctx: OpContext, dims: int) -> dict:
    kernel = _per_dim(ctx["kernel_size"], dims)
    stride = _per_dim(ctx["stride"], dims) if ctx["stride"] else kernel
    padding = _per_dim(ctx["padding"], dims)
    return {"kernel_shape": kernel, "strides": stride, "pads": padding + padding,
            "ceil_mode": int(bool(ctx["ceil_mode"]))}


def _max_pool(ctx: OpContext, dims: int) -> str:
    attrs = _window_attrs(ctx, dims)
    attrs["dilations"] = _per_dim(ctx["dilation"], dims)
    return _pool(ctx, "MaxPool", dims, **attrs)


@translates("aten.max_pool1d.default", "aten.max_pool2d.default", "aten.max_pool3d.default")
def max_pool(ctx: OpContext) -> str:
    return _max_pool(ctx, _spatial_dims(ctx))


@translates("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def max_pool_with_indices(ctx: OpContext) -> list[str | None]:
    """(y, indices); torch's indices count within each (H, W) plane, ONNX's across the whole
    tensor, so reading them is refused rather than translated wrongly."""
    if ctx.used_outputs() & {1}:
        raise ctx.unsupported("the indices output is not supported (return_indices=True)")
    return [_max_pool(ctx, _spatial_dims(ctx)), None]


@translates("aten.avg_pool1d.default", "aten.avg_pool2d.default", "aten.avg_pool3d.default")
def avg_pool(ctx: OpContext) -> str:
    if ctx.args.get("divisor_override") is not None:
        raise ctx.unsupported("divisor_override has no ONNX AveragePool equivalent")
    dims = _spatial_dims(ctx)
    return _pool(ctx, "AveragePool", dims, count_include_pad=int(bool(ctx["count_include_pad"])),
                 **_window_attrs(ctx, dims))


def _adaptive(ctx: OpContext, dims: int, pool: str, global_pool: str) -> str:
    x: TensorValue = ctx.tensor("self")
    out = _per_dim(ctx["output_size"], dims)
    spatial = x.shape[-dims:]
    if all(o == 1 for o in out):
        return _pool(ctx, global_pool, dims)
    if not all(is_static(d) for d in spatial):
        raise ctx.unsupported(f"output size {out} of an input with dynamic spatial dims {spatial}")
    spatial = [int(d) for d in spatial]
    if any(o < 1 or d % o for d, o in zip(spatial, out)):
        raise ctx.unsupported(f"output size {out} does not divide the input's spatial dims {spatial} evenly "
                              "(windows of unequal sizes have no ONNX pooling equivalent)")
    kernel = [d // o for d, o in zip(spatial, out)]
    return _pool(ctx, pool, dims, kernel_shape=kernel, strides=kernel)


@translates("aten.adaptive_avg_pool1d.default", "aten.adaptive_avg_pool2d.default",
            "aten.adaptive_avg_pool3d.default", "aten._adaptive_avg_pool2d.default",
            "aten._adaptive_avg_pool3d.default")
def adaptive_avg_pool(ctx: OpContext) -> str:
    return _adaptive(ctx, _spatial_dims(ctx), "AveragePool", "GlobalAveragePool")


@translates("aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default",
            "aten.adaptive_max_pool3d.default")
def adaptive_max_pool(ctx: OpContext) -> list[str | None]:
    """(y, indices); reading the indices is refused as for max_pool2d_with_indices."""
    if ctx.used_outputs() & {1}:
        raise ctx.unsupported("the indices output is not supported (return_indices=True)")
    return [_adaptive(ctx, _spatial_dims(ctx), "MaxPool", "GlobalMaxPool"), None]
