"""The engine's overflow check and gradient norm inside DeepSpeed's ZeRO stage 1 / 2 optimizer.

ORTModule's guide wraps the optimizer `deepspeed.initialize` returns, and the training loop stays
DeepSpeed's:

    engine, optimizer, _, _ = deepspeed.initialize(model=trainrt.RTModule(model), optimizer=client, config=config)
    optimizer = trainrt.optim.FP16_Optimizer(optimizer)   # the same object, its two checks replaced
    loss = engine(batch); engine.backward(loss); engine.step()

DeepSpeed keeps its loss scaling, clipping, reductions and step. What changes is how its step reads
this rank's gradient partitions before it steps (stage_1_and_2.DeepSpeedZeroOptimizer):
- has_overflow_partitioned_grads_serial: inf / NaN anywhere, one `isinf`/`isnan` reduction per
  gradient upstream;
- get_grad_norm_direct (L2): one float64 copy and norm per gradient upstream;
both become one threaded engine pass over all of them (_C.unscale_and_norm: squares summed in double,
f32 / bf16 / f16 read as they are). The cross-rank all-reduces, the parameters counted (model
parallel, pipeline-replicated, padding) and the -1 sentinel for an inf / NaN norm are DeepSpeed's.
ORTModule's modifier replaced the same two methods (and has_overflow_serial, which stage 1 / 2 no
longer calls).

Anything else is returned unchanged, with a warning: ZeRO-3 (its overflow check already reads one
flat buffer; its norm is its own), ZeRO-Offload (norm and overflow are computed while gradients are copied to the CPU
partition), DeepSpeed's BF16_Optimizer / FP16_Optimizer, or an accelerator other than the CPU (the
engine reads CPU memory).
"""

from __future__ import annotations

import math
import types
import warnings

import torch
from torch.utils.dlpack import to_dlpack

from trainrt import _C


def is_deepspeed_optimizer(optimizer) -> bool:
    """Whether optimizer is one of the wrappers deepspeed.initialize returns (they scale the loss and
    step themselves); DeepSpeed's plain optimizers (deepspeed.ops: FusedAdam, DeepSpeedCPUAdam) are not."""
    return type(optimizer).__module__.startswith("deepspeed.runtime.")


def use_engine_checks(optimizer):
    """Replaces the ZeRO stage 1 / 2 optimizer's overflow check and L2 norm with the engine's; returns it."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    why_not = None
    if not isinstance(optimizer, DeepSpeedZeroOptimizer):
        why_not = f"{type(optimizer).__module__}.{type(optimizer).__qualname__} is not the ZeRO stage 1 / 2 optimizer"
    elif optimizer.cpu_offload:
        why_not = "ZeRO-Offload computes the norm and overflow while it copies gradients to the CPU"
    elif get_accelerator().device_name() != "cpu":
        why_not = f"the gradients are on {get_accelerator().device_name()}, the engine reads CPU memory"
    if why_not:
        warnings.warn(f"trainrt FP16_Optimizer: DeepSpeed's optimizer keeps its own overflow check and gradient "
                      f"norm ({why_not})", UserWarning, stacklevel=3)
        return optimizer
    if not hasattr(optimizer, "_deepspeed_grad_norm_direct"):  # not replaced yet
        optimizer._deepspeed_grad_norm_direct = optimizer.get_grad_norm_direct  # for the norms other than L2
        optimizer.get_grad_norm_direct = types.MethodType(_grad_norm_direct, optimizer)
        optimizer.has_overflow_partitioned_grads_serial = types.MethodType(_partitioned_grads_overflow, optimizer)
    return optimizer


def sum_of_squares(grads: list[torch.Tensor]) -> float:
    """sum(g^2) over every element of every gradient, in double, in one engine pass; inf or NaN
    when an element is (a sum of squares of finite f32 values cannot overflow a double)."""
    grads = [g.detach().contiguous() for g in grads]
    names = [f"gradient {i} {tuple(g.shape)}" for i, g in enumerate(grads)]
    norm, found_inf = _C.unscale_and_norm(names, [to_dlpack(g) for g in grads], 1.0)
    return norm if found_inf else norm * norm


def _partitioned_grads_overflow(self) -> torch.Tensor:
    """DeepSpeedZeroOptimizer.has_overflow_partitioned_grads_serial: whether any of this rank's
    averaged gradients holds an inf or NaN, as the (1,) bool tensor its has_overflow all-reduces."""
    grads = [g for i in range(len(self.bit16_groups)) for g in self.averaged_gradients[i] if g is not None]
    return torch.tensor([not math.isfinite(sum_of_squares(grads))])


def _grad_norm_direct(self, gradients, params, norm_type=2) -> torch.Tensor:
    """DeepSpeedZeroOptimizer.get_grad_norm_direct for the L2 norm: this rank's sum of squares from
    the engine, then DeepSpeed's reductions over the data- and model-parallel groups; -1 for inf / NaN."""
    if float(norm_type) != 2.0:
        return self._deepspeed_grad_norm_direct(gradients, params, norm_type)
    from deepspeed import comm as dist
    from deepspeed.runtime.constants import PIPE_REPLICATED
    from deepspeed.runtime.utils import is_model_parallel_parameter, mask_nan_or_inf_with_val_inplace

    # The gradients DeepSpeed counts: padding tensors dropped before pairing with the parameters,
    # pipeline-replicated parameters once, model-parallel duplicates on model-parallel rank 0 only.
    unpadded = (g for g in gradients if not getattr(g, "_zero_padding", False))
    counted = [g for g, p in zip(unpadded, params)
               if not getattr(p, PIPE_REPLICATED, False) and (is_model_parallel_parameter(p) or self.model_parallel_rank == 0)]
    total = torch.tensor(sum_of_squares(counted), dtype=torch.float32)
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.dp_process_group)
    self._model_parallel_all_reduce(tensor=total, op=dist.ReduceOp.SUM)
    total = total.sqrt()
    mask_nan_or_inf_with_val_inplace(total, device=self.device)
    return total
