"""The engine's gradient norm (and, in stage 1 / 2, its overflow check) inside DeepSpeed's ZeRO optimizers.

ORTModule's guide wraps the optimizer `deepspeed.initialize` returns, and the training loop stays
DeepSpeed's:

    engine, optimizer, _, _ = deepspeed.initialize(model=trainrt.RTModule(model), optimizer=client, config=config)
    optimizer = trainrt.optim.FP16_Optimizer(optimizer)   # the same object, its checks replaced
    loss = engine(batch); engine.backward(loss); engine.step()

DeepSpeed keeps its loss scaling, clipping, reductions and step. What changes is how its step reads
this rank's gradient partitions before it steps:
- get_grad_norm_direct (L2), stage 1 / 2 (stage_1_and_2.DeepSpeedZeroOptimizer) and stage 3
  (stage3.DeepSpeedZeroOptimizer_Stage3): one float64 copy and norm per gradient upstream;
- has_overflow_partitioned_grads_serial, stage 1 / 2: inf / NaN anywhere, one `isinf`/`isnan`
  reduction per gradient upstream;
each becomes one threaded engine pass over all of them (_C.unscale_and_norm: squares summed in double,
f32 / bf16 / f16 read as they are). The cross-rank all-reduces, the parameters counted (model
parallel, pipeline-replicated, padding; in stage 3 DeepSpeed's own helpers pick the partition group,
whether every rank counts, and the expert-parallel group), the norm's dtype and the -1 sentinel for
an inf / NaN norm are DeepSpeed's. ORTModule's modifier replaced the same two stage 1 / 2 methods
(and has_overflow_serial, which stage 1 / 2 no longer calls).

Stage 3's overflow check (has_overflow) stays DeepSpeed's. It already reads one flat buffer
(grad_partitions_flat_buffer: `isinf(...).any()` and `isnan(...).any()`), so an engine pass would save
one of two reads; and it runs only in fp16, which DeepSpeed's CPU accelerator refuses unless mkldnn
does fp16 on that CPU (is_fp16_supported), as it does not where the tests run: no test could run a
replacement. In bf16 and f32 stage 3 checks no overflow: an inf / NaN gradient makes the engine's
norm -1, and that skips the step.

Anything else is returned unchanged, with a warning: ZeRO-Offload (stage 1 / 2 `cpu_offload`,
stage 3 `offload_optimizer`: norm and overflow are computed while gradients are copied to the CPU
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
    """Replaces a ZeRO optimizer's L2 norm (and, in stage 1 / 2, its overflow check) with the engine's; returns it."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    stage_3 = isinstance(optimizer, DeepSpeedZeroOptimizer_Stage3)
    why_not = None
    if not stage_3 and not isinstance(optimizer, DeepSpeedZeroOptimizer):
        why_not = (f"{type(optimizer).__module__}.{type(optimizer).__qualname__} is not a ZeRO stage 1, 2 or 3 "
                   f"optimizer")
    elif optimizer.offload_optimizer if stage_3 else optimizer.cpu_offload:
        why_not = "ZeRO-Offload computes the norm and overflow while it copies gradients to the CPU"
    elif get_accelerator().device_name() != "cpu":
        why_not = f"the gradients are on {get_accelerator().device_name()}, the engine reads CPU memory"
    if why_not:
        warnings.warn(f"trainrt FP16_Optimizer: DeepSpeed's optimizer keeps its own overflow check and gradient "
                      f"norm ({why_not})", UserWarning, stacklevel=3)
        return optimizer
    if hasattr(optimizer, "_deepspeed_grad_norm_direct"):  # replaced already
        return optimizer
    optimizer._deepspeed_grad_norm_direct = optimizer.get_grad_norm_direct  # for the norms other than L2
    if stage_3:
        optimizer.get_grad_norm_direct = types.MethodType(_stage_3_grad_norm_direct, optimizer)
    else:
        optimizer.get_grad_norm_direct = types.MethodType(_stage_1_and_2_grad_norm_direct, optimizer)
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


def _stage_1_and_2_grad_norm_direct(self, gradients, params, norm_type=2) -> torch.Tensor:
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


def _stage_3_grad_norm_direct(self, gradients, params, norm_type=2) -> torch.Tensor:
    """DeepSpeedZeroOptimizer_Stage3.get_grad_norm_direct for the L2 norm: this rank's sum of squares
    from the engine, then DeepSpeed's reductions over the partition, model- and expert-parallel
    groups; a 0-d tensor of get_norm_dtype() (float64 on the CPU), -1 for inf / NaN."""
    if float(norm_type) != 2.0:
        return self._deepspeed_grad_norm_direct(gradients, params, norm_type)
    from deepspeed import comm as dist
    from deepspeed.comm import pg_utils
    from deepspeed.runtime.utils import is_model_parallel_parameter, mask_nan_or_inf_with_val_inplace
    from deepspeed.runtime.zero.utils import get_norm_dtype

    self._assert_same_partition_group(params)
    process_group = self._get_param_partition_group(params[0])
    # Where every rank holds its own partition (AutoEP experts, a partition group spanning the
    # model-parallel peers) each counts its gradients; otherwise model-parallel duplicates count on
    # model-parallel rank 0 only. None counted leaves 0, as DeepSpeed's empty-list case does.
    counts_every_rank = self._grad_norm_counts_every_rank(params, process_group)
    counted = [g for g, p in zip(gradients, params)
               if counts_every_rank or is_model_parallel_parameter(p) or self.model_parallel_rank == 0]
    total = torch.tensor(sum_of_squares(counted), dtype=get_norm_dtype())
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=process_group)
    if not counts_every_rank:
        self._model_parallel_all_reduce(tensor=total, op=dist.ReduceOp.SUM)
    expert_parallel_group = self._autoep_expert_parallel_group(params)
    if pg_utils.is_parallel(expert_parallel_group):
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=expert_parallel_group)
    total = total.sqrt()
    mask_nan_or_inf_with_val_inplace(total, device=self.device)
    return total
