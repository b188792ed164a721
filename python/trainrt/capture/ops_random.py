"""Random draws: torch.rand / randn and their _like forms, x.uniform_, x.normal_, x.bernoulli_ and
x.exponential_ (after functionalization), and the dropouts that are not ONNX Dropout (per channel:
nn.Dropout1d / 2d / 3d; SELU's AlphaDropout and FeatureAlphaDropout), as the engine's random ops
(ops/random_schemas.cc).

They draw from the run's seed, which RTModule takes from torch's default generator, so
torch.manual_seed reproduces a run; the numbers are the engine's stream, not eager's (as Dropout's
masks). What a draw feeds is differentiated as drawn: the backward reads the forward's values,
never a second draw (random ops are never recomputed). Stochastic depth (DropPath in timm and in
Hugging Face's ConvNeXt, Swin, BEiT, ...) is `floor(keep + torch.rand(shape))`, so models trained
with drop_path_rate > 0 run in the engine. A draw from a torch.Generator of the caller's own is
refused: its stream is the caller's.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext
from trainrt.capture.onnx_builder import fill_value, onnx_type
from trainrt.capture.registry import translates


def _refuse_own_generator(ctx: OpContext) -> None:
    if ctx.args.get("generator") is not None:
        raise ctx.unsupported("draws from a torch.Generator of its own")


def _shaped_like_output(ctx: OpContext) -> str:
    """A tensor of the output's (possibly symbolic) shape, for a *Like op to take the dims of:
    the `self` input where the op has one, else zeros of that shape (their values are not read)."""
    _refuse_own_generator(ctx)
    source = ctx.args.get("self")
    if source is not None and hasattr(source, "name"):
        return source.name
    return ctx.emit("ConstantOfShape", [ctx.ints(ctx.out.shape)], value=fill_value(0, torch.float32))


@translates("aten.rand.default", "aten.rand_like.default", "aten.uniform.default")
def uniform(ctx: OpContext) -> str:
    """U(from, to): torch.rand's [0, 1) when not given."""
    return ctx.emit("RandomUniformLike", [_shaped_like_output(ctx)], dtype=onnx_type(ctx.out_dtype),
                    low=float(ctx.args.get("from", 0.0)), high=float(ctx.args.get("to", 1.0)))


@translates("aten.randn.default", "aten.randn_like.default", "aten.normal_functional.default")
def normal(ctx: OpContext) -> str:
    """N(mean, std): torch.randn's N(0, 1) when not given (x.normal_(mean, std) functionalized)."""
    return ctx.emit("RandomNormalLike", [_shaped_like_output(ctx)], dtype=onnx_type(ctx.out_dtype),
                    mean=float(ctx.args.get("mean", 0.0)), scale=float(ctx.args.get("std", 1.0)))


@translates("aten.bernoulli.default")
def bernoulli(ctx: OpContext) -> str:
    """torch.bernoulli(p): 1 with each element's probability."""
    _refuse_own_generator(ctx)
    return ctx.emit("Bernoulli", [ctx.tensor("self")], dtype=onnx_type(ctx.out_dtype))


@translates("aten.bernoulli.p")
def bernoulli_p(ctx: OpContext) -> str:
    """x.bernoulli_(p) with one probability for every element (timm's DropPath): u < p, in x's dtype."""
    u = ctx.emit("RandomUniformLike", [_shaped_like_output(ctx)], dtype=onnx_type(torch.float64))
    return ctx.cast_to(ctx.emit("Less", [u, ctx.const(float(ctx["p"]), torch.float64)]), torch.bool, ctx.out_dtype)


@translates("aten.exponential.default")
def exponential(ctx: OpContext) -> str:
    """x.exponential_(lambd): -log(1 - u) / lambd, in f64 (u < 1, so always finite), then x's dtype."""
    u = ctx.emit("RandomUniformLike", [_shaped_like_output(ctx)], dtype=onnx_type(torch.float64))
    one = ctx.const(1.0, torch.float64)
    tail = ctx.emit("Neg", [ctx.emit("Log", [ctx.emit("Sub", [one, u])])])
    scaled = ctx.emit("Div", [tail, ctx.const(float(ctx.args.get("lambd", 1.0)), torch.float64)])
    return ctx.cast_to(scaled, torch.float64, ctx.out_dtype)


def _keep_flags(ctx: OpContext, x, p: float, per_channel: bool) -> str:
    """1 where an element (or, per_channel, a whole (batch, channel) plane) is kept, else 0, in x's
    dtype: u >= p for uniforms u of the noise's shape, (N, C, 1, ...) per channel as torch's
    make_feature_noise makes it, else x's own."""
    if per_channel:
        noise = ctx.ints([x.shape[0], x.shape[1]] + [1] * (x.rank - 2))
        source = ctx.emit("ConstantOfShape", [noise], value=fill_value(0, torch.float32))
    else:
        source = x.name
    u = ctx.emit("RandomUniformLike", [source], dtype=onnx_type(torch.float32))
    return ctx.cast_to(ctx.emit("GreaterOrEqual", [u, ctx.const(float(p), torch.float32)]), torch.bool, x.dtype)


@translates("aten.feature_dropout.default")
def feature_dropout(ctx: OpContext) -> str:
    """nn.Dropout1d / 2d / 3d: whole channels dropped, the rest scaled by 1 / (1 - p); identity in
    eval or with p = 0 (torch's _dropout_impl with feature_dropout)."""
    x, p = ctx.tensor("input"), float(ctx["p"])
    if not ctx["train"] or p == 0:
        return x.name
    if p == 1:
        return ctx.emit("Mul", [x, ctx.const(0.0, x.dtype)])
    keep = _keep_flags(ctx, x, p, per_channel=True)
    return ctx.emit("Mul", [x, ctx.emit("Mul", [keep, ctx.const(1.0 / (1.0 - p), x.dtype)])])


@translates("aten.alpha_dropout.default", "aten.feature_alpha_dropout.default")
def alpha_dropout(ctx: OpContext) -> str:
    """nn.AlphaDropout (and per channel, FeatureAlphaDropout), which keeps SELU's mean and variance:
    y = x * keep * a + ((keep - 1) * alpha * a + alpha * a * p) with alpha = 1.7580993408473766 and
    a = 1 / sqrt((alpha^2 p + 1)(1 - p)) (torch's _dropout_impl); identity in eval or with p = 0."""
    x, p = ctx.tensor("input"), float(ctx["p"])
    if not ctx["train"] or p == 0:
        return x.name
    if p == 1:
        return ctx.emit("Mul", [x, ctx.const(0.0, x.dtype)])
    alpha = 1.7580993408473766
    a = 1.0 / ((alpha * alpha * p + 1) * (1 - p)) ** 0.5
    keep = _keep_flags(ctx, x, p, per_channel=ctx.node.target.__name__.startswith("feature_alpha_dropout"))
    scaled = ctx.emit("Mul", [x, ctx.emit("Mul", [keep, ctx.const(a, x.dtype)])])
    shift = ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Sub", [keep, ctx.const(1.0, x.dtype)]),
                                              ctx.const(alpha * a, x.dtype)]),
                             ctx.const(alpha * a * p, x.dtype)])
    return ctx.emit("Add", [scaled, shift])
