"""Loss ATen ops: cross entropy, negative log likelihood, mean squared error.

torch's `reduction` enum (0 none, 1 mean, 2 sum; torch.nn._reduction) is ONNX's reduction string.
Cross entropy maps to SoftmaxCrossEntropyLoss, whose gradient the engine fuses; both ONNX losses
share torch's weighted mean (divide by the summed weights of the targets not ignored).
"""

from __future__ import annotations

import torch

from trainrt.capture.context import OpContext
from trainrt.capture.registry import translates

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _class_loss(ctx: OpContext, op: str) -> str:
    x, target = ctx.tensor("self"), ctx.tensor("target")
    if target.dtype not in (torch.int64, torch.int32):
        raise ctx.unsupported(f"with {target.dtype} (probability) targets has no TrainRT translation")
    if x.rank < 2:
        raise ctx.unsupported("on an unbatched (1-D) input has no TrainRT translation")
    return ctx.emit(op, [x, target, ctx["weight"]], reduction=_REDUCTIONS[ctx["reduction"]],
                    ignore_index=int(ctx["ignore_index"]))


@translates("aten.cross_entropy_loss.default")
def cross_entropy_loss(ctx: OpContext) -> str:
    """Class-index targets; label smoothing has no ONNX form."""
    if ctx["label_smoothing"] != 0:
        raise ctx.unsupported(f"with label_smoothing={ctx['label_smoothing']} has no TrainRT translation")
    return _class_loss(ctx, "SoftmaxCrossEntropyLoss")


@translates("aten.nll_loss_nd.default", "aten.nll_loss.default", "aten.nll_loss2d.default")
def nll_loss(ctx: OpContext) -> str:
    return _class_loss(ctx, "NegativeLogLikelihoodLoss")


@translates("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def nll_loss_forward(ctx: OpContext) -> list[str | None]:
    """(loss, total_weight); the total weight has no ONNX output."""
    if 1 in ctx.used_outputs():
        raise ctx.unsupported("total_weight output has no TrainRT translation")
    return [_class_loss(ctx, "NegativeLogLikelihoodLoss"), None]


@translates("aten.mse_loss.default")
def mse_loss(ctx: OpContext) -> str:
    """(x - y)^2, then mean / sum over all elements or none."""
    t = ctx.out_dtype
    d = ctx.emit("Sub", [ctx.operand(ctx["self"], t), ctx.operand(ctx["target"], t)])
    sq = ctx.emit("Mul", [d, d])
    reduction = _REDUCTIONS[ctx["reduction"]]
    if reduction == "none":
        return sq
    return ctx.emit("ReduceMean" if reduction == "mean" else "ReduceSum", [sq], keepdims=0)
