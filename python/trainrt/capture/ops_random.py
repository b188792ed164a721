"""Random draws: torch.rand / randn and their _like forms, x.uniform_, x.normal_, x.bernoulli_ and
x.exponential_ (after functionalization), as the engine's random ops (ops/random_schemas.cc).

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
