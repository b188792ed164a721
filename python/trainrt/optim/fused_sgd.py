"""`trainrt.optim.FusedSGD`: torch.optim.SGD as one fused multi-tensor engine call per parameter group.

    optimizer = trainrt.optim.FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

A drop-in torch.optim.Optimizer with torch.optim.SGD's options, update and state ("momentum_buffer"
when momentum != 0, created on a parameter's first step as buf = grad), so state_dicts load both
ways. step_in_backward=True steps each parameter during the backward, as FusedAdam's option does
(step_in_backward.py). Parameters must be contiguous and on the CPU, float32, float16 or bfloat16 (state in their dtype,
math in f32, as torch.optim.SGD(fused=True)).
"""

from __future__ import annotations

import torch

from trainrt import _C
from trainrt.optim._groups import CheckedGroup, FusedOptimizer, adopt, state_view, view


class FusedSGD(FusedOptimizer):
    """SGD with momentum, dampening, Nesterov, weight decay and maximize, as torch.optim.SGD computes it.

    Example:

        >>> optimizer = trainrt.optim.FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        >>> model(x).square().mean().backward(); optimizer.step(); optimizer.zero_grad()
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 step_in_backward: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults, step_in_backward)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def _step_group(self, group: dict, checked: CheckedGroup, grad_scale: float) -> None:
        options = _engine_options(group)
        params = [group["params"][i] for i in checked.indices] if options.momentum != 0 else []
        states = [self.state[p] for p in params]
        buffers = [state_view(s, "momentum_buffer") for s in states]
        adopt(_C.sgd_step(checked.names, checked.params, checked.grads, buffers, options, grad_scale=grad_scale),
              states, "momentum_buffer", params)

    def _add_to_consumer(self, consumer, index: int, p: torch.Tensor) -> None:
        g, i = self._locate(p)
        options = _engine_options(self.param_groups[g])
        # torch.optim.SGD keeps no step count: the engine's goes to a scratch counter of this
        # optimizer (it must outlive the backward; SGD's math does not read it). Without a momentum
        # buffer yet, the first step creates it from the gradient (_after_engine_step).
        if not hasattr(self, "_scratch_step"):
            self._scratch_step = torch.tensor(0.0)
        buffer = state_view(self.state[p], "momentum_buffer") if options.momentum != 0 else None
        consumer.add_sgd(index, f"param_groups[{g}][{i}]", view(p), view(self._scratch_step), buffer, options)

    def _after_engine_step(self, consumer, index: int, p: torch.Tensor) -> None:
        state = self.state[p]
        if self.param_groups[self._locate(p)[0]]["momentum"] != 0 and "momentum_buffer" not in state:
            adopt([consumer.momentum_buffer(index)], [state], "momentum_buffer", [p])


def _engine_options(group: dict):
    """The engine's SgdOptions for a parameter group."""
    options = _C.SgdOptions()
    options.lr = float(group["lr"])
    options.momentum = float(group["momentum"])
    options.dampening = float(group["dampening"])
    options.weight_decay = float(group["weight_decay"])
    options.nesterov = bool(group["nesterov"])
    options.maximize = bool(group["maximize"])
    return options
