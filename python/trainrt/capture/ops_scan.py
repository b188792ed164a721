"""Along-a-dim ops: differences of neighbours (torch.diff) and running sums (torch.cumsum).

Hugging Face's mask code (transformers' `find_packed_sequence_indices`, reached by GPT-2 or BERT
called without an attention_mask and without a cache) computes
`(torch.diff(position_ids, prepend=p, dim=-1) != 1).cumsum(-1)` to find packed sequences.
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext
from trainrt.capture.ops_shape import INT64_MAX, dim_axis
from trainrt.capture.registry import translates


@translates("aten.diff.default")
def diff(ctx: OpContext) -> str:
    """torch.diff(x, n, dim, prepend, append): Concat(prepend, x, append) along dim, then n times
    y = y[1:] - y[:-1] (Slice + Sub; logical xor, i.e. not-equal, for bool as torch does). Slices
    clamp, so n at or past the dim's length gives an empty dim as in torch; the gradient is that
    of Slice, Sub and Concat."""
    x = ctx.tensor("self")
    axis = dim_axis(ctx["dim"], x.rank)
    t = ctx.out_dtype
    parts = [ctx.cast(v, t) for v in (ctx["prepend"], x, ctx["append"]) if v is not None]
    y = parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, axis=axis)
    axes = ctx.ints([axis])
    for _ in range(ctx["n"]):
        later = ctx.emit("Slice", [y, ctx.ints([1]), ctx.ints([INT64_MAX]), axes])
        earlier = ctx.emit("Slice", [y, ctx.ints([0]), ctx.ints([-1]), axes])
        y = ctx.emit("Xor" if t == torch.bool else "Sub", [later, earlier])
    return y


@translates("aten.cumsum.default")
def cumsum(ctx: OpContext) -> str:
    """torch.cumsum(x, dim, dtype=None) is ONNX CumSum in the output dtype (torch sums bool and
    integer tensors in int64 unless dtype= says otherwise)."""
    x = ctx.tensor("self")
    axis = ctx.const(dim_axis(ctx["dim"], x.rank), torch.int64)
    return ctx.emit("CumSum", [ctx.cast(x, ctx.out_dtype), axis])
