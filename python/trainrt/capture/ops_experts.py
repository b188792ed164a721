"""transformers' grouped matmul of MoE experts (`transformers::grouped_mm_fallback`, the custom op
its `grouped_mm` experts implementation calls on the CPU; transformers/integrations/moe.py), and
torch's own `torch._grouped_mm`, which it calls instead for bf16 / f16 experts.

    grouped_mm_fallback(x (S, I), w (E, I, O), offs (E,)) -> y (S, O)
x holds the S token-expert pairs sorted by expert; offs[e] is the cumulative count of rows of
experts 0..e, so rows offs[e-1] <= s < offs[e] belong to expert e, y[s] = x[s] @ w[e], and rows at
or past offs[E-1] are 0. The engine has no grouped GEMM; this is composed from one MatMul against
every expert and a selection:
    expert[s] = #{e : offs[e] <= s}                 (S,) in 0..E (E: past the last row)
    all       = x @ w as (I, E * O)                 (S, E, O)
    y[s]      = all[s, expert[s]]                   Where over the one-hot of expert, summed
Its gradients are MatMul's, with dY routed to each row's own expert only: the gradient of x is
dY @ w[e]^T and of w[e] the sum of x[s]^T dY[s] over its rows, as the custom op's backward. It
costs E times the FLOPs of a grouped GEMM, right for tiny configs; real MoE sizes need a grouped
GEMM kernel in the engine.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext
from trainrt.capture.ops_shape import reshape_to
from trainrt.capture.registry import translates


@translates("transformers.grouped_mm_fallback.default")
def grouped_mm_fallback(ctx: OpContext) -> str:
    return _grouped_mm(ctx, ctx.tensor("input"), ctx.tensor("weight"), ctx.tensor("offs"))


@translates("aten._grouped_mm.default")
def aten_grouped_mm(ctx: OpContext) -> str:
    """torch._grouped_mm(x, w, offs): what transformers' grouped_mm experts call directly where torch
    has the kernel (bf16 and f16 experts), the same product as grouped_mm_fallback. The (S, I) x
    (E, I, O) form with offs is taken; a bias, another out_dtype or the other layouts (batched 3-D
    x 3-D, offsets over K) are refused, naming the form."""
    x, w = ctx.tensor("self"), ctx.tensor("mat2")
    out_dtype = ctx.args.get("out_dtype")
    if ctx.args.get("offs") is None or ctx.args.get("bias") is not None or out_dtype not in (None, x.dtype):
        raise ctx.unsupported("other than (S, I) x (E, I, O) with offs, without bias or another out_dtype, "
                              "has no translation")
    return _grouped_mm(ctx, x, w, ctx.tensor("offs"))


def _grouped_mm(ctx: OpContext, x, w, offs) -> str:
    if x.rank != 2 or w.rank != 3 or offs.rank != 1:
        raise ctx.unsupported(f"of shapes {x.shape}, {w.shape}, {offs.shape} has no translation "
                              "(x (S, I), w (E, I, O), offs (E,))")
    experts, width_in, width_out = w.shape
    zero, one = ctx.const(0, torch.int64), ctx.const(1, torch.int64)
    rows = ctx.emit("Range", [zero, ctx.operand(x.shape[0], torch.int64), one])  # (S,)
    ends = ctx.emit("Unsqueeze", [ctx.cast(offs, torch.int64), ctx.ints([0])])  # (1, E)
    passed = ctx.emit("LessOrEqual", [ends, ctx.emit("Unsqueeze", [rows, ctx.ints([1])])])  # (S, E)
    expert = ctx.emit("ReduceSum", [ctx.cast_to(passed, torch.bool, torch.int64), ctx.ints([1])], keepdims=1)  # (S, 1)
    ids = ctx.emit("Range", [zero, ctx.operand(experts, torch.int64), one])  # (E,)
    mine = ctx.emit("Unsqueeze", [ctx.emit("Equal", [expert, ids]), ctx.ints([2])])  # (S, E, 1)
    stacked = reshape_to(ctx, ctx.emit("Transpose", [w], perm=[1, 0, 2]), [width_in, experts * width_out])  # (I, E*O)
    every = reshape_to(ctx, ctx.emit("MatMul", [x, stacked]), [x.shape[0], experts, width_out])  # (S, E, O)
    picked = ctx.emit("Where", [mine, every, ctx.const(0, x.dtype)])
    return ctx.emit("ReduceSum", [picked, ctx.ints([1])], keepdims=0)  # (S, O)
