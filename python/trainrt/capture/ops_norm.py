"""Normalizations: layer norm (ONNX LayerNormalization), RMS norm and batch norm (spelled out).

The engine has LayerNormalization with a fused gradient. It has no RMSNormalization or
BatchNormalization, so those are written with ops it differentiates (ReduceMean, Sub, Mul, Sqrt, Reciprocal), following the
formulas of torch.nn.BatchNorm1d's documentation: in training, normalize with the batch's mean and
biased variance and update the running stats with the unbiased variance,
running = (1 - momentum) * running + momentum * batch_stat; in eval, normalize with the running stats.
"""

from __future__ import annotations

import sympy
import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import sym_expr


def _layer_norm(ctx: OpContext, num_outputs: int) -> list[str]:
    """LayerNormalization over the last len(normalized_shape) axes; ONNX needs a scale, so a
    missing weight is a ones initializer (a missing bias is simply an omitted input)."""
    x, shape = ctx.tensor("input"), list(ctx["normalized_shape"])
    scale = ctx["weight"]
    if scale is None:
        scale = ctx.b.add_initializer(torch.ones(shape, dtype=x.dtype), f"{ctx.node.name}/ones")
    outs = ctx.emit("LayerNormalization", [x, scale, ctx["bias"]], num_outputs, axis=-len(shape),
                    epsilon=float(ctx["eps"]))
    return [outs] if num_outputs == 1 else outs


@translates("aten.layer_norm.default")
def layer_norm(ctx: OpContext) -> str:
    return _layer_norm(ctx, 1)[0]


@translates("aten.native_layer_norm.default")
def native_layer_norm(ctx: OpContext) -> list[str | None]:
    """(y, mean, rstd): ONNX's Mean and InvStdDev outputs, emitted only when read."""
    outs = _layer_norm(ctx, max(ctx.used_outputs() | {0}) + 1)
    return outs + [None] * (3 - len(outs))


@translates("aten.rms_norm.default")
def rms_norm(ctx: OpContext) -> str:
    """x / sqrt(mean(x^2) + eps) * weight over the last len(normalized_shape) axes
    (torch.nn.RMSNorm; eps None is the dtype's machine epsilon)."""
    x, n = ctx.tensor("input"), len(ctx["normalized_shape"])
    eps = ctx["eps"] if ctx["eps"] is not None else torch.finfo(x.dtype).eps
    mean_sq = ctx.emit("ReduceMean", [ctx.emit("Mul", [x, x]), ctx.ints(range(-n, 0))], keepdims=1)
    rms = ctx.emit("Sqrt", [ctx.emit("Add", [mean_sq, ctx.const(float(eps), x.dtype)])])
    y = ctx.emit("Mul", [x, ctx.emit("Reciprocal", [rms])])
    return y if ctx["weight"] is None else ctx.emit("Mul", [y, ctx["weight"]])


def _per_channel(ctx: OpContext, v: TensorValue, rank: int) -> str:
    """A (C,) tensor shaped (1, C, 1, ...) to broadcast over an input of `rank` (N, C, *)."""
    return ctx.emit("Unsqueeze", [v, ctx.ints([0, *range(2, rank)])])


def _normalize(ctx: OpContext, use_batch_stats: bool) -> tuple[str, str | None, str | None]:
    """(y, batch mean, batch biased variance), both (1, C, 1, ...), for batch statistics; (y, None,
    None) when normalizing with the running stats."""
    x, w, b = ctx.tensor("input"), ctx["weight"], ctx["bias"]
    axes = ctx.ints([0, *range(2, x.rank)])
    if use_batch_stats:
        mean = ctx.emit("ReduceMean", [x, axes], keepdims=1)
        centered = ctx.emit("Sub", [x, mean])
        var = ctx.emit("ReduceMean", [ctx.emit("Mul", [centered, centered]), axes], keepdims=1)
    else:
        mean = None
        centered = ctx.emit("Sub", [x, _per_channel(ctx, ctx.tensor("running_mean"), x.rank)])
        var = _per_channel(ctx, ctx.tensor("running_var"), x.rank)
    std = ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(float(ctx["eps"]), x.dtype)])])
    y = ctx.emit("Mul", [centered, ctx.emit("Reciprocal", [std])])
    if w is not None:
        y = ctx.emit("Mul", [y, _per_channel(ctx, w, x.rank)])
    if b is not None:
        y = ctx.emit("Add", [y, _per_channel(ctx, b, x.rank)])
    return y, mean, (var if use_batch_stats else None)


def _updated(ctx: OpContext, running: TensorValue, batch_stat: str, factor: str | None = None) -> str:
    """(1 - momentum) * running + momentum * batch_stat (squeezed to (C,), times factor if given)."""
    x = ctx.tensor("input")
    stat = ctx.emit("Squeeze", [batch_stat, ctx.ints([0, *range(2, x.rank)])])
    if factor is not None:
        stat = ctx.emit("Mul", [stat, factor])
    m = float(ctx["momentum"])
    kept = ctx.emit("Mul", [running, ctx.const(1.0 - m, running.dtype)])
    return ctx.emit("Add", [kept, ctx.emit("Mul", [stat, ctx.const(m, running.dtype)])])


def _bessel(ctx: OpContext, dtype: torch.dtype) -> str:
    """n / (n - 1) for the n = N * H * W ... values per channel (symbolic with the batch)."""
    x = ctx.tensor("input")
    n = sympy.Mul(*[sym_expr(d) for i, d in enumerate(x.shape) if i != 1])
    if n.is_number:
        return ctx.const(int(n) / max(int(n) - 1, 1), dtype)
    count = ctx.cast_to(ctx.symbols.lower(n), torch.int64, dtype)
    return ctx.emit("Div", [count, ctx.emit("Sub", [count, ctx.const(1.0, dtype)])])


@translates("aten._native_batch_norm_legit_functional.default")
def batch_norm_functional(ctx: OpContext) -> list[str | None]:
    """(y, save_mean, save_rstd, new running_mean, new running_var) of functionalized BatchNorm."""
    if ctx.used_outputs() & {1, 2}:
        raise ctx.unsupported("saved mean / rstd outputs have no TrainRT translation")
    rm, rv = ctx.tensor("running_mean"), ctx.tensor("running_var")
    if not ctx["training"]:
        return [_normalize(ctx, False)[0], None, None, rm.name, rv.name]
    y, mean, var = _normalize(ctx, True)
    return [y, None, None, _updated(ctx, rm, mean), _updated(ctx, rv, var, _bessel(ctx, rv.dtype))]


@translates("aten.batch_norm.default")
def batch_norm(ctx: OpContext) -> str:
    """BatchNorm that updates no running stats: eval mode, or training without tracked stats
    (export.py functionalizes training with running stats into the form above)."""
    if ctx["training"] and ctx["running_mean"] is not None:
        raise ctx.unsupported("in training mode with running stats must be functionalized first")
    return _normalize(ctx, ctx["training"])[0]


@translates("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(ctx: OpContext) -> list[str | None]:
    return [_normalize(ctx, False)[0], None, None]
