"""Neural-network ATen ops: linear and matmul family, softmax, dropout, attention.

These map to ONNX ops with TrainRT gradients (Gemm, MatMul, Softmax, LogSoftmax, Dropout), so the engine's autodiff differentiates the captured graph without decompositions of its
own. scaled_dot_product_attention becomes TrainRT's fused ScaledDotProductAttention (com.trainrt; its
forward and backward hold one block of the attention matrix at a time); inputs it does not take are
spelled out as PyTorch documents the math (torch.nn.functional.scaled_dot_product_attention,
"efficient implementation equivalent").
"""

from __future__ import annotations

import math

import torch

from trainrt.capture.context import OpContext, TensorValue
from trainrt.capture.onnx_builder import fill_value
from trainrt.capture.registry import translates
from trainrt.capture.symbolic import is_static


def _transpose_last2(ctx: OpContext, x: TensorValue) -> str:
    perm = list(range(x.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.emit("Transpose", [x], perm=perm)


@translates("aten.linear.default")
def linear(ctx: OpContext) -> str:
    """x @ W^T + b: Gemm(transB) for 2-D x, else TrainRT's FusedMatMul(transB) (the weight is
    read transposed in place: no Transpose of W every step), then Add."""
    x, w, b = ctx.tensor("input"), ctx.tensor("weight"), ctx["bias"]
    if x.rank == 2:
        return ctx.emit("Gemm", [x, w, b], transB=1)
    if x.rank < 2:
        y = ctx.emit("MatMul", [x, _transpose_last2(ctx, w)])
    else:
        y = ctx.emit("FusedMatMul", [x, w], transB=1, domain="com.trainrt")
    return y if b is None else ctx.emit("Add", [y, b])


@translates("aten.addmm.default")
def addmm(ctx: OpContext) -> str:
    """beta * self + alpha * (mat1 @ mat2): exactly Gemm's formula."""
    return ctx.emit("Gemm", [ctx.tensor("mat1"), ctx.tensor("mat2"), ctx.tensor("self")],
                    alpha=float(ctx["alpha"]), beta=float(ctx["beta"]))


@translates("aten.mm.default", "aten.bmm.default")
def mm(ctx: OpContext) -> str:
    return ctx.emit("MatMul", [ctx.tensor("self"), ctx.tensor("mat2")])


@translates("aten.matmul.default")
def matmul(ctx: OpContext) -> str:
    """ONNX MatMul has numpy matmul semantics, as torch.matmul (1-D operands, batch broadcast)."""
    return ctx.emit("MatMul", [ctx.tensor("self"), ctx.tensor("other")])


@translates("aten.baddbmm.default")
def baddbmm(ctx: OpContext) -> str:
    """beta * self + alpha * (batch1 @ batch2); beta = 0 ignores self (torch's rule, even for NaN)."""
    t = ctx.out_dtype
    y = ctx.emit("MatMul", [ctx.tensor("batch1"), ctx.tensor("batch2")])
    if ctx["alpha"] != 1:
        y = ctx.emit("Mul", [y, ctx.const(ctx["alpha"], t)])
    if ctx["beta"] == 0:
        return y
    c = ctx.tensor("self").name
    if ctx["beta"] != 1:
        c = ctx.emit("Mul", [c, ctx.const(ctx["beta"], t)])
    return ctx.emit("Add", [y, c])


@translates("aten.softmax.int", "aten._softmax.default")
def softmax(ctx: OpContext) -> str:
    return ctx.emit("Softmax", [ctx.operand(ctx["self"], ctx.out_dtype)], axis=ctx["dim"])


@translates("aten.log_softmax.int", "aten._log_softmax.default")
def log_softmax(ctx: OpContext) -> str:
    return ctx.emit("LogSoftmax", [ctx.operand(ctx["self"], ctx.out_dtype)], axis=ctx["dim"])


def dropout_with_mask(ctx: OpContext, x: TensorValue, p: float) -> list[str]:
    """ONNX Dropout in training mode: [y, mask]. The mask output is kept because the engine's
    Dropout gradient (DropoutGrad) reads it."""
    return ctx.emit("Dropout", [x, ctx.const(float(p), x.dtype), ctx.const(True, torch.bool)], 2)


@translates("aten.dropout.default")
def dropout(ctx: OpContext) -> str:
    """Dropout as the module's train/eval mode traced it: identity in eval or with p = 0."""
    x = ctx.tensor("input")
    if not ctx["train"] or ctx["p"] == 0:
        return x.name
    return dropout_with_mask(ctx, x, ctx["p"])[0]


@translates("aten.native_dropout.default")
def native_dropout(ctx: OpContext) -> list[str]:
    """(y, bool mask); without training the mask is all true."""
    x = ctx.tensor("input")
    if ctx["train"] is False or ctx["p"] == 0:
        mask = None
        if 1 in ctx.used_outputs():
            mask = ctx.emit("ConstantOfShape", [ctx.emit("Shape", [x])],
                            value=fill_value(True, torch.bool))
        return [x.name, mask]
    return dropout_with_mask(ctx, x, ctx["p"])


def _math_attention(ctx: OpContext, q: TensorValue, k: TensorValue, v: TensorValue, mask, dropout_p: float,
                    is_causal: bool, scale) -> str:
    """softmax(q @ k^T * scale + mask) @ v spelled out in ONNX ops, materializing the (L, S) weights:
    the form for what the fused op does not take (ranks above 4, dtypes other than f32, f64 and bf16).

    q: (..., L, E), k: (..., S, E), v: (..., S, Ev). A causal mask keeps j <= i (torch's
    top-left-aligned tril); a bool attn_mask keeps True entries, a float one is added.
    """
    head_dim = q.shape[-1]
    if scale is None and not is_static(head_dim):
        raise ctx.unsupported("with a symbolic head dim and no scale has no TrainRT translation")
    scale = scale if scale is not None else 1.0 / math.sqrt(int(head_dim))
    t = q.dtype
    scores = ctx.emit("MatMul", [q, _transpose_last2(ctx, k)])  # (..., L, S)
    scores = ctx.emit("Mul", [scores, ctx.const(scale, t)])
    if is_causal:
        # -inf strictly above the diagonal, 0 on and below it: Trilu(upper, k=1) of a -inf fill.
        fill = ctx.emit("ConstantOfShape", [ctx.ints([q.shape[-2], k.shape[-2]])],
                        value=fill_value(float("-inf"), t))
        causal = ctx.emit("Trilu", [fill, ctx.const(1, torch.int64)], upper=1)
        scores = ctx.emit("Add", [scores, causal])
    if mask is not None and mask.dtype == torch.bool:
        scores = ctx.emit("Where", [mask, scores, ctx.const(float("-inf"), t)])
    elif mask is not None:
        scores = ctx.emit("Add", [scores, ctx.cast(mask, t)])
    weights = ctx.emit("Softmax", [scores], axis=-1)
    if dropout_p > 0:
        weights = dropout_with_mask(ctx, TensorValue(weights, t, ()), dropout_p)[0]
    return ctx.emit("MatMul", [weights, v])


def _fuses(q: TensorValue) -> bool:
    """Whether the fused op takes these inputs: f32, f64 or bf16 (computed in f32), at most 4 dims."""
    return q.dtype in (torch.float32, torch.float64, torch.bfloat16) and 2 <= q.rank <= 4


def _fused_attention(ctx: OpContext, q: TensorValue, k: TensorValue, v: TensorValue, mask, dropout_p: float,
                     is_causal: bool, scale) -> list[str]:
    """[output, logsumexp] of TrainRT's ScaledDotProductAttention, which never holds the (L, S)
    matrix and takes grouped K/V heads (enable_gqa) as they are. Inputs of rank 2 or 3 get leading
    axes of 1 to (B, H, L, E) and lose them again; the mask broadcasts right-aligned either way.
    A float mask gets no gradient: the engine refuses one that needs it (UnsupportedOp)."""
    extra = list(range(4 - q.rank))
    if extra:
        q, k, v = (TensorValue(ctx.emit("Unsqueeze", [x, ctx.ints(extra)]), x.dtype, (1,) * len(extra) + x.shape)
                   for x in (q, k, v))
    mask_name = None if mask is None else mask.name if mask.dtype == torch.bool else ctx.cast(mask, q.dtype)
    outputs = ctx.emit("ScaledDotProductAttention", [q, k, v, mask_name], 3 if dropout_p > 0 else 2,
                       domain="com.trainrt", is_causal=int(bool(is_causal)),
                       scale=None if scale is None else float(scale),
                       dropout_p=float(dropout_p) if dropout_p > 0 else None)
    out, lse = outputs[0], outputs[1]
    if extra:
        out = ctx.emit("Squeeze", [out, ctx.ints(extra)])
        lse = ctx.emit("Squeeze", [lse, ctx.ints(extra)])
    return [out, lse]


@translates("aten.scaled_dot_product_attention.default")
def scaled_dot_product_attention(ctx: OpContext) -> str:
    """torch.nn.functional.scaled_dot_product_attention: the fused op where it applies, else the math."""
    q, k, v = ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")
    args = (ctx["attn_mask"], ctx["dropout_p"], ctx["is_causal"], ctx["scale"])
    if _fuses(q):
        return _fused_attention(ctx, q, k, v, *args)[0]
    if ctx["enable_gqa"]:
        raise ctx.unsupported(f"with enable_gqa=True has no TrainRT translation for {q.dtype} inputs of rank {q.rank}")
    return _math_attention(ctx, q, k, v, *args)


@translates("aten._scaled_dot_product_flash_attention_for_cpu.default")
def scaled_dot_product_flash_attention_for_cpu(ctx: OpContext) -> list[str]:
    """(output, logsumexp): torch's CPU flash kernel, which the fused op computes alike."""
    q, k, v = ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")
    if not _fuses(q):
        raise ctx.unsupported(f"has no TrainRT translation for {q.dtype} inputs of rank {q.rank}")
    return _fused_attention(ctx, q, k, v, ctx["attn_mask"], ctx["dropout_p"], ctx["is_causal"], ctx["scale"])


@translates("aten._scaled_dot_product_attention_math.default")
def scaled_dot_product_attention_math(ctx: OpContext) -> list[str]:
    """(output, attention weights) of torch's math path. The fused op has no weights to give, so
    graphs that read them (or pass their own dropout_mask) are not translated."""
    q, k, v = ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")
    if 1 in ctx.used_outputs() or ctx["dropout_mask"] is not None:
        raise ctx.unsupported("with its attention weights used or a dropout_mask given has no TrainRT translation")
    args = (ctx["attn_mask"], ctx["dropout_p"], ctx["is_causal"], ctx["scale"])
    if _fuses(q):
        return [_fused_attention(ctx, q, k, v, *args)[0], None]
    if ctx["enable_gqa"]:
        raise ctx.unsupported(f"with enable_gqa=True has no TrainRT translation for {q.dtype} inputs of rank {q.rank}")
    return [_math_attention(ctx, q, k, v, *args), None]
