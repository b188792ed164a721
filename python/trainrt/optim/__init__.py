"""`trainrt.optim`: drop-in torch optimizers whose step is one fused multi-tensor engine call per group.

They work on any torch module's parameters, under RTModule or not; state_dicts load into and from
torch's own optimizers. `step_in_backward=True` (FusedAdam, FusedSGD) steps each parameter during
`loss.backward()`, as soon as its gradient is final.

Example:

    >>> optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4, weight_decay=0.1)
    >>> optimizer = trainrt.optim.FusedAdam(params, adam_w_mode=trainrt.optim.AdamWMode.ADAMW_TRANSFORMERS)
    >>> optimizer = trainrt.optim.FusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> optimizer = trainrt.optim.FusedLamb(model.parameters(), lr=1e-3, weight_decay=0.01, max_grad_norm=1.0)
    >>> optimizer = trainrt.optim.FP16_Optimizer(trainrt.optim.FusedAdam(model.parameters()), max_grad_norm=1.0)
    >>> optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4, step_in_backward=True)
"""

from trainrt.optim.fused_adam import AdamWMode, FusedAdam  # noqa: F401
from trainrt.optim.fused_lamb import FusedLamb  # noqa: F401
from trainrt.optim.fused_sgd import FusedSGD  # noqa: F401
from trainrt.optim.fp16_optimizer import FP16_Optimizer  # noqa: F401

__all__ = ["FusedAdam", "AdamWMode", "FusedSGD", "FusedLamb", "FP16_Optimizer"]
