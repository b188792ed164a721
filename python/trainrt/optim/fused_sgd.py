"""`trainrt.optim.FusedSGD`: torch.optim.SGD as one fused multi-tensor engine call per parameter group.

    optimizer = trainrt.optim.FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

A drop-in torch.optim.Optimizer with torch.optim.SGD's options, update and state ("momentum_buffer"
when momentum != 0, created on a parameter's first step as buf = grad), so state_dicts load both
ways. Parameters must be contiguous and on the CPU, float32, float16 or bfloat16 (state in their dtype,
math in f32, as torch.optim.SGD(fused=True)).
"""

from __future__ import annotations


from trainrt import _C
from trainrt.optim._groups import CheckedGroup, FusedOptimizer, adopt, state_view


class FusedSGD(FusedOptimizer):
    """SGD with momentum, dampening, Nesterov, weight decay and maximize, as torch.optim.SGD computes it."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False):
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
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def _step_group(self, group: dict, checked: CheckedGroup, grad_scale: float) -> None:
        options = _C.SgdOptions()
        options.lr = float(group["lr"])
        options.momentum = float(group["momentum"])
        options.dampening = float(group["dampening"])
        options.weight_decay = float(group["weight_decay"])
        options.nesterov = bool(group["nesterov"])
        options.maximize = bool(group["maximize"])
        states = [self.state[group["params"][i]] for i in checked.indices] if options.momentum != 0 else []
        buffers = [state_view(s, "momentum_buffer") for s in states]
        adopt(_C.sgd_step(checked.names, checked.params, checked.grads, buffers, options, grad_scale=grad_scale),
              states, "momentum_buffer")
