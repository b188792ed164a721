"""`trainrt.optim.FusedAdam`: Adam / AdamW as one fused multi-tensor engine call per parameter group.

    optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4, weight_decay=0.1)  # = torch AdamW
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    loss.backward(); optimizer.step(); scheduler.step(); optimizer.zero_grad()

With step_in_backward=True every parameter is stepped during loss.backward(), as soon as its
gradient is final (inside the engine's backward under RTModule, from a torch hook otherwise), and
p.grad stays None: step() and zero_grad() are then no-ops, LR schedulers keep working (the group's lr
is read at each backward), and gradient accumulation or clipping cannot be done (see
step_in_backward.py).

A drop-in torch.optim.Optimizer: parameter groups with their own options, add_param_group, LR
schedulers (lr is read from the group at every step), hooks, state_dict. The state of a parameter is
what torch.optim.Adam keeps, under the same names and types ("step" a 0-d float32 tensor, "exp_avg",
"exp_avg_sq", "max_exp_avg_sq" with amsgrad), so a FusedAdam state_dict loads into torch.optim.AdamW
(or Adam) and theirs into FusedAdam. The step reads and writes each element of p, g, m, v once
(28 bytes per parameter), vectorized and spread over the engine's threads, in place on the torch
tensors. Parameters must be contiguous and on the CPU, float32, float16 or bfloat16 (gradients of the
same dtype); 16-bit parameters keep their state in their dtype and step in f32 with one rounding per
stored value, as torch.optim.AdamW(fused=True) does (see tests/python/test_fused_optim_16bit.py).
"""

from __future__ import annotations

import enum

import torch

from trainrt import _C
from trainrt.optim._groups import CheckedGroup, FusedOptimizer, scalar_dtype, state_view, step_with_state, view


class AdamWMode(enum.IntEnum):
    """How weight decay enters the step (the names ONNX Runtime Training users know).

    Example:

        >>> optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=5e-5, weight_decay=0.01,
        ...                                     adam_w_mode=trainrt.optim.AdamWMode.ADAMW_TRANSFORMERS)
    """

    ADAM_L2_REGULARIZATION = 0  # torch.optim.Adam(weight_decay=wd): g += wd * p before the moments
    ADAMW_TRANSFORMERS = 1      # transformers' AdamW: p -= lr * wd * p after the update
    ADAMW_TORCH = 2             # torch.optim.AdamW: p *= 1 - lr * wd before the update


_ENGINE_MODE = {
    AdamWMode.ADAM_L2_REGULARIZATION: _C.WeightDecayMode.L2,
    AdamWMode.ADAMW_TRANSFORMERS: _C.WeightDecayMode.HUGGING_FACE,
    AdamWMode.ADAMW_TORCH: _C.WeightDecayMode.DECOUPLED,
}


class FusedAdam(FusedOptimizer):
    """Adam in three weight-decay conventions (AdamWMode), computed as torch / transformers compute them.

    bias_correction=False drops the bias corrections (bc1 = bc2 = 1) in every mode, as Apex's
    FusedAdam(bias_correction=False) and transformers' AdamW(correct_bias=False) do. set_grad_none
    makes zero_grad() set gradients to None (the default); False zeroes them in place instead.
    maximize (keyword only, as in torch) ascends the objective. step_in_backward (keyword only) steps
    each parameter during the backward (module docstring).

    Example:

        >>> optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=3e-4, weight_decay=0.1)  # torch AdamW's step
        >>> loss = model(x).square().mean()
        >>> loss.backward(); optimizer.step(); optimizer.zero_grad()
        >>> torch.optim.AdamW(model.parameters()).load_state_dict(optimizer.state_dict())   # same state
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, adam_w_mode: AdamWMode = AdamWMode.ADAMW_TORCH,
                 bias_correction: bool = True, set_grad_none: bool = True, amsgrad: bool = False, *,
                 maximize: bool = False, step_in_backward: bool = False):
        _check_options(lr, betas, eps, weight_decay, adam_w_mode)
        # adam_w_mode is kept as a plain int: torch.load(weights_only=True) refuses pickled enums.
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adam_w_mode=int(adam_w_mode),
                        bias_correction=bias_correction, amsgrad=amsgrad, maximize=maximize)
        super().__init__(params, defaults, step_in_backward)
        self.set_grad_none = set_grad_none

    def __setstate__(self, state):
        """Also the end of load_state_dict: fills what a torch.optim.Adam / AdamW state_dict lacks."""
        super().__setstate__(state)
        for group in self.param_groups:
            if "adam_w_mode" not in group and "decoupled_weight_decay" in group:  # saved by torch.optim
                group["adam_w_mode"] = int(AdamWMode.ADAMW_TORCH if group["decoupled_weight_decay"]
                                           else AdamWMode.ADAM_L2_REGULARIZATION)
            for key in ("adam_w_mode", "bias_correction", "amsgrad", "maximize"):
                group.setdefault(key, self.defaults[key])
            for p in group["params"]:
                s = self.state.get(p)
                if s and "step" in s and not torch.is_tensor(s["step"]):  # very old torch checkpoints
                    s["step"] = torch.tensor(float(s["step"]), dtype=scalar_dtype())

    def add_param_group(self, param_group: dict) -> None:
        if "adam_w_mode" in param_group:
            param_group["adam_w_mode"] = int(_check_mode(param_group["adam_w_mode"]))
        super().add_param_group(param_group)

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(self.set_grad_none if set_to_none is None else set_to_none)

    def _step_group(self, group: dict, checked: CheckedGroup, grad_scale: float) -> None:
        options = _engine_options(group)
        grad_scale = -grad_scale if group["maximize"] else grad_scale

        def engine_step(steps, exp_avgs, exp_avg_sqs, max_exp_avg_sqs=()):
            return _C.adam_step(checked.names, checked.params, checked.grads, steps, exp_avgs, exp_avg_sqs,
                                list(max_exp_avg_sqs), options, grad_scale=grad_scale)

        keys = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if options.amsgrad else ("exp_avg", "exp_avg_sq")
        step_with_state(self.state, group, checked.indices, keys, engine_step)

    def _add_to_consumer(self, consumer, index: int, p: torch.Tensor) -> None:
        g, i = self._locate(p)
        group = self.param_groups[g]
        options = _engine_options(group)
        state = self.state[p]
        # Created before the engine's step, as torch.optim.Adam creates them: zeros like p.
        if "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=scalar_dtype())
        keys = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if options.amsgrad else ("exp_avg", "exp_avg_sq")
        for key in keys:
            if key not in state:
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        consumer.add_adam(index, f"param_groups[{g}][{i}]", view(p), view(state["step"]), state_view(state, "exp_avg"),
                          state_view(state, "exp_avg_sq"),
                          state_view(state, "max_exp_avg_sq") if options.amsgrad else None, options,
                          grad_scale=-1.0 if group["maximize"] else 1.0)


def _engine_options(group: dict):
    """The engine's AdamOptions for a parameter group."""
    options = _C.AdamOptions()
    options.lr = float(group["lr"])
    options.beta1, options.beta2 = (float(b) for b in group["betas"])
    options.eps = float(group["eps"])
    options.weight_decay = float(group["weight_decay"])
    options.amsgrad = bool(group["amsgrad"])
    options.bias_correction = bool(group["bias_correction"])
    options.mode = _ENGINE_MODE[AdamWMode(group["adam_w_mode"])]
    return options


def _check_options(lr, betas, eps, weight_decay, adam_w_mode) -> None:
    """torch.optim.Adam's argument checks, with its messages."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    _check_mode(adam_w_mode)


def _check_mode(adam_w_mode) -> AdamWMode:
    try:
        return AdamWMode(adam_w_mode)
    except ValueError:
        raise ValueError(f"Invalid adam_w_mode {adam_w_mode!r}: choose one of "
                         f"{', '.join(f'{m.name} ({m.value})' for m in AdamWMode)}") from None
