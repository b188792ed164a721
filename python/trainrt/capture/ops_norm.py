"""Normalizations: layer norm (ONNX LayerNormalization), RMS norm and group norm (spelled out),
batch norm (ONNX BatchNormalization, opset 15 semantics) and weight norm (of a weight, spelled out).

LayerNormalization and BatchNormalization have fused gradients in the engine. RMS norm, group norm
and weight norm are written with ops it differentiates (ReduceMean, ReduceL2, Mul, Sqrt, Reciprocal). BatchNorm follows torch.nn.BatchNorm1d's
documentation: in training, normalize with the batch's mean and biased variance and update the running
stats with the unbiased variance, running = (1 - momentum) * running + momentum * batch_stat; in eval,
normalize with the running stats. momentum=None (a cumulative average) reaches here as a BatchNorm
without running stats plus the averaging written out (cumulative_batch_norm.py).
"""

from __future__ import annotations

import math

import sympy
import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.ops_shape import reshape_to
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static, sym_expr


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


def _group_norm(ctx: OpContext, x: TensorValue, groups: int, weight, bias, eps: float) -> str:
    """torch.nn.GroupNorm (Wu & He 2018): x (N, C, *spatial) seen as (N, G, C / G * prod(spatial)),
    each group normalized with its mean and biased variance (InstanceNormalization of the groups as
    channels, with unit scale; composed for 16-bit inputs), then back to x's shape and scaled and
    shifted per channel by weight and bias (C,), broadcast as (C, 1, ..., 1)."""
    channels = _channels(ctx, x)
    grouped = reshape_to(ctx, x, [x.shape[0], groups, channels // groups * math.prod(x.shape[2:])])
    if x.dtype in (torch.float32, torch.float64):  # the engine's fused kernel: each (n, g) plane at once
        ones, zeros = ctx.b.const([1.0] * groups, x.dtype), ctx.b.const([0.0] * groups, x.dtype)
        normalized = ctx.emit("InstanceNormalization", [grouped, ones, zeros], epsilon=float(eps))
    else:
        axes = ctx.ints([2])
        centered = ctx.emit("Sub", [grouped, ctx.emit("ReduceMean", [grouped, axes], keepdims=1)])
        var = ctx.emit("ReduceMean", [ctx.emit("Mul", [centered, centered]), axes], keepdims=1)  # (N, G, 1)
        inv_std = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(eps, x.dtype)])])])
        normalized = ctx.emit("Mul", [centered, inv_std])
    y = reshape_to(ctx, normalized, x.shape)

    def per_channel(p: TensorValue) -> str:  # (C,) -> (C, 1, ..., 1)
        return ctx.emit("Unsqueeze", [p, ctx.ints(range(1, x.rank - 1))]) if x.rank > 2 else p.name

    if weight is not None:
        y = ctx.emit("Mul", [y, per_channel(weight)])
    if bias is not None:
        y = ctx.emit("Add", [y, per_channel(bias)])
    return y


@translates("aten.group_norm.default")
def group_norm(ctx: OpContext) -> str:
    return _group_norm(ctx, ctx.tensor("input"), int(ctx["num_groups"]), ctx["weight"], ctx["bias"],
                       float(ctx["eps"]))


@translates("aten.native_group_norm.default")
def native_group_norm(ctx: OpContext) -> list[str | None]:
    """(y, mean, rstd) of group norm's decomposed form; the saved statistics have no translation."""
    if ctx.used_outputs() & {1, 2}:
        raise ctx.unsupported("saved mean / rstd outputs have no TrainRT translation")
    return [_group_norm(ctx, ctx.tensor("input"), int(ctx["group"]), ctx["weight"], ctx["bias"],
                        float(ctx["eps"])), None, None]


@translates("aten._weight_norm.default")
def weight_norm(ctx: OpContext) -> str:
    """torch._weight_norm(v, g, dim) = v * g / ||v|| (Salimans & Kingma 2016), the norm over every
    dim but `dim` (kept as 1s, the shape of g), or over all of v for dim -1."""
    v, g = ctx.tensor("v"), ctx.tensor("g")
    dim = ctx["dim"]
    axes = list(range(v.rank)) if dim == -1 else [a for a in range(v.rank) if a != (dim + v.rank if dim < 0 else dim)]
    norm = ctx.emit("ReduceL2", [v, ctx.ints(axes)], keepdims=1)
    return ctx.emit("Mul", [v, ctx.emit("Div", [g, norm])])


def _channels(ctx: OpContext, x: TensorValue) -> int:
    if x.rank < 2 or not is_static(x.shape[1]):
        raise ctx.unsupported(f"needs an input of shape (N, C, ...) with a static C, got {x.shape}")
    return int(x.shape[1])


def _filled(ctx: OpContext, value: TensorValue | None, x: TensorValue, fill: float) -> str:
    """A (C,) parameter, or a constant of `fill` where torch passes None (affine=False,
    track_running_stats=False): ONNX BatchNormalization requires all five inputs."""
    if value is not None:
        return value.name
    return ctx.b.const([fill] * _channels(ctx, x), x.dtype)


def _bessel(ctx: OpContext, dtype: torch.dtype) -> str:
    """n / (n - 1) for the n = N * d1 * ... values per channel (symbolic with the batch)."""
    x = ctx.tensor("input")
    n = sympy.Mul(*[sym_expr(d) for i, d in enumerate(x.shape) if i != 1])
    if n.is_number:
        return ctx.const(int(n) / max(int(n) - 1, 1), dtype)
    count = ctx.cast_to(ctx.symbols.lower(n), torch.int64, dtype)
    return ctx.emit("Div", [count, ctx.emit("Sub", [count, ctx.const(1.0, dtype)])])


def _batch_norm(ctx: OpContext, training: bool, running_mean, running_var) -> tuple[str, str | None, str | None]:
    """(y, new running_mean, new running_var) as one ONNX BatchNormalization; the running stats are
    None unless training with them.

    torch updates running = (1 - m) * running + m * batch_stat with the UNBIASED batch variance
    (nn.BatchNorm1d docs) while normalizing with the biased one; ONNX's node updates with the
    biased variance as running * momentum + batch_stat * (1 - momentum). With ONNX momentum 1 - m,
    feeding running_var / c (c = n / (n - 1), Bessel's correction) and multiplying the node's
    running_var by c gives torch's (1 - m) * running_var + m * c * biased_var exactly."""
    x = ctx.tensor("input")
    scale = _filled(ctx, ctx["weight"], x, 1.0)
    bias = _filled(ctx, ctx["bias"], x, 0.0)
    eps = float(ctx["eps"])
    if not training:
        return ctx.emit("BatchNormalization", [x, scale, bias, running_mean, running_var], epsilon=eps), None, None
    if running_mean is None:
        y = ctx.emit("BatchNormalization", [x, scale, bias, _filled(ctx, None, x, 0.0),
                                            _filled(ctx, None, x, 1.0)], epsilon=eps, training_mode=1)
        return y, None, None
    bessel = _bessel(ctx, running_var.dtype)
    y, new_mean, new_var = ctx.emit(
        "BatchNormalization", [x, scale, bias, running_mean, ctx.emit("Div", [running_var, bessel])], 3,
        epsilon=eps, momentum=1.0 - float(ctx["momentum"]), training_mode=1)
    return y, new_mean, ctx.emit("Mul", [new_var, bessel])


@translates("aten._native_batch_norm_legit_functional.default")
def batch_norm_functional(ctx: OpContext) -> list[str | None]:
    """(y, save_mean, save_rstd, new running_mean, new running_var) of functionalized BatchNorm."""
    if ctx.used_outputs() & {1, 2}:
        raise ctx.unsupported("saved mean / rstd outputs have no TrainRT translation")
    rm, rv = ctx.tensor("running_mean"), ctx.tensor("running_var")
    if not ctx["training"]:
        return [_batch_norm(ctx, False, rm, rv)[0], None, None, rm.name, rv.name]
    y, new_mean, new_var = _batch_norm(ctx, True, rm, rv)
    return [y, None, None, new_mean, new_var]


@translates("aten.batch_norm.default")
def batch_norm(ctx: OpContext) -> str:
    """BatchNorm that updates no running stats: eval mode, or training without tracked stats
    (export.py functionalizes training with running stats into the form above)."""
    if ctx["training"] and ctx["running_mean"] is not None:
        raise ctx.unsupported("in training mode with running stats must be functionalized first")
    return _batch_norm(ctx, ctx["training"], ctx["running_mean"], ctx["running_var"])[0]


@translates("aten._native_batch_norm_legit_no_training.default")
def batch_norm_no_training(ctx: OpContext) -> list[str | None]:
    if ctx.used_outputs() & {1, 2}:
        raise ctx.unsupported("saved mean / rstd outputs have no TrainRT translation")
    return [_batch_norm(ctx, False, ctx.tensor("running_mean"), ctx.tensor("running_var"))[0], None, None]


@translates("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(ctx: OpContext) -> list[str | None]:
    """Training without running stats (track_running_stats=False): batch statistics only."""
    if ctx.used_outputs() & {1, 2}:
        raise ctx.unsupported("saved mean / rstd outputs have no TrainRT translation")
    if not ctx["training"]:
        raise ctx.unsupported("without running stats normalizes with batch statistics only in training")
    return [_batch_norm(ctx, True, None, None)[0], None, None]
