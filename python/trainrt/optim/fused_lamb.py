"""`trainrt.optim.FusedLamb`: Apex's FusedLAMB as one global-norm pass plus one fused engine call per group.

    optimizer = trainrt.optim.FusedLamb(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning") as apex.optimizers.FusedLAMB
computes it (apex/csrc/multi_tensor_lamb.cu; the formulas are in src/trainrt/optim/lamb.h):

- the gradients of all groups are clipped together: divided by norm / max_grad_norm when their global
  L2 norm exceeds max_grad_norm (max_grad_norm = 0 turns clipping off; Apex would zero the
  gradients instead). max_grad_norm is the optimizer's, as in Apex, not a group option;
- Adam moments with bias correction, weight decay decoupled (adam_w_mode=True, added to the update)
  or L2 (added to the gradient);
- each parameter steps by lr * ||p|| / ||update|| * update (ratio 1 when either norm is 0), the trust
  ratio only where weight_decay != 0 unless use_nvlamb=True, as in Apex.

Unlike Apex, the step count is kept per parameter (state["step"], a 0-d float32 tensor, as torch.optim
keeps it) rather than per group, so parameters added later or without gradients at some steps get
their own bias correction; state is "step", "exp_avg", "exp_avg_sq". Parameters may be float32,
float16 or bfloat16 (moments in the parameter's dtype, math in f32). The step reads the gradients
twice (global norm, then the step) and writes nothing but the parameters and the moments.
"""

from __future__ import annotations

from torch.utils.dlpack import to_dlpack

from trainrt import _C
from trainrt.optim._groups import CheckedGroup, DTensor, FusedOptimizer, describe, step_with_state


class FusedLamb(FusedOptimizer):
    """LAMB with Apex FusedLAMB's options and semantics (see the module docstring).

    Example:

        >>> optimizer = trainrt.optim.FusedLamb(model.parameters(), lr=1e-3, weight_decay=0.01, max_grad_norm=1.0)
        >>> model(x).square().mean().backward(); optimizer.step(); optimizer.zero_grad()
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, bias_correction: bool = True, max_grad_norm: float = 1.0,
                 adam_w_mode: bool = True, set_grad_none: bool = True, *, use_nvlamb: bool = False):
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
        if not 0.0 <= max_grad_norm:
            raise ValueError(f"Invalid max_grad_norm value: {max_grad_norm} (0 turns clipping off)")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                        max_grad_norm=max_grad_norm, adam_w_mode=adam_w_mode, use_nvlamb=use_nvlamb)
        super().__init__(params, defaults)
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(self.set_grad_none if set_to_none is None else set_to_none)

    def _global_grad_scale(self, groups: list[tuple[dict, CheckedGroup]], grad_scale: float) -> float:
        """grad_scale with the clip folded in: the global norm of every gradient (times grad_scale) in
        one engine pass, then Apex's g / (norm / max_grad_norm) when the norm exceeds max_grad_norm."""
        _refuse_shards(self.param_groups, groups)
        names = [n for _, checked in groups for n in checked.names]
        # The step's own capsules are consumed by the step: the norm pass gets capsules of its own.
        grads = [to_dlpack(group["params"][i].grad.contiguous())
                 for group, checked in groups for i in checked.indices]
        norm, _ = _C.unscale_and_norm(names, grads, grad_scale)
        max_grad_norm = float(self.defaults["max_grad_norm"])
        if max_grad_norm > 0 and norm > max_grad_norm:
            return grad_scale / (norm / max_grad_norm)
        return grad_scale

    def _step_group(self, group: dict, checked: CheckedGroup, grad_scale: float) -> None:
        options = _C.LambOptions()
        options.lr = float(group["lr"])
        options.beta1, options.beta2 = (float(b) for b in group["betas"])
        options.eps = float(group["eps"])
        options.weight_decay = float(group["weight_decay"])
        options.bias_correction = bool(group["bias_correction"])
        options.adam_w_mode = bool(group["adam_w_mode"])
        options.use_nvlamb = bool(group["use_nvlamb"])
        step_with_state(self.state, group, checked.indices, ("exp_avg", "exp_avg_sq"),
                        lambda steps, exp_avgs, exp_avg_sqs: _C.lamb_step(
                            checked.names, checked.params, checked.grads, steps, exp_avgs, exp_avg_sqs, options,
                            grad_scale=grad_scale))


def _refuse_shards(param_groups: list[dict], groups: list[tuple[dict, CheckedGroup]]) -> None:
    """LAMB's norms are of whole tensors (the global gradient norm, each trust ratio): a rank holding
    DTensor shards (FSDP2) would compute them over its part alone."""
    for group, checked in groups:
        for i in checked.indices:
            p = group["params"][i]
            if isinstance(p, DTensor):
                raise TypeError(f"FusedLamb computes the global gradient norm and each trust ratio ||p|| / ||update|| "
                                f"over whole tensors, and {describe(param_groups.index(group), i, p)} is a DTensor "
                                "shard (FSDP2) holding part of one: use FusedAdam, FusedSGD or a torch optimizer")
