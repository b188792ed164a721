"""trainrt.optim.FP16_Optimizer around DeepSpeed's ZeRO stage 1, 2 and 3 optimizers (trainrt/optim/deepspeed_zero.py)
on 2 ranks (gloo, DeepSpeed's CPU accelerator) against the same DeepSpeed run without it: the fp32
master parameters within 1e-4 relative, the same global gradient norms and the same skipped step
(an inf loss), with the engine's overflow check and norm counted as the ones that ran. Two precisions:
- bf16 (the CPU accelerator does not take fp16): DeepSpeed casts RTModule's module to bf16; stage
  1 / 2 check overflow and take the norm, stage 3 takes the norm only (its overflow check is for
  fp16), and an inf / NaN norm skips the step; the engine runs the bf16 model
  (test_low_precision_parameters.py);
- engine-bf16: DeepSpeed in f32 around RTModule(mixed_precision="bf16"), fallback disabled; DeepSpeed
  takes the norm only (no overflow check in f32), and an inf / NaN norm skips the step.
Stage 3 partitions the parameters (deepspeed.zero.Init) and RTModule gathers them (trainrt/zero3.py)."""

import math
import os
import warnings

import pytest
import torch

from test_ddp import PER_RANK, TiedLM
from trainrt.optim import FP16_Optimizer, deepspeed_zero
from trainrt.testing import run_on_ranks

deepspeed = pytest.importorskip("deepspeed")

STEPS, OVERFLOW_STEP = 4, 1  # rank 0's loss is inf at OVERFLOW_STEP: both runs must skip that step


def _batches():
    g = torch.Generator().manual_seed(11)
    return [(torch.randint(0, 64, (2 * PER_RANK, 8), generator=g), torch.randint(0, 64, (2 * PER_RANK, 8), generator=g))
            for _ in range(STEPS)]


def _train(rank, stage, precision, engine_checks):
    """STEPS DeepSpeed steps of this rank's half of each batch: (fp32 master parameters, global
    gradient norms, skipped steps, the engine passes the checks ran)."""
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    import trainrt

    passes = []  # per engine pass the ZeRO optimizer ran: the number of gradients it read
    engine_pass = deepspeed_zero.sum_of_squares

    def counted(grads):
        passes.append(len(grads))
        return engine_pass(grads)

    deepspeed_zero.sum_of_squares = counted
    # Clipping at 0.05 is active at every step here, so the norm changes the update, not only the report.
    config = {"train_micro_batch_size_per_gpu": PER_RANK, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "gradient_clipping": 0.05}
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config, enabled=stage == 3):  # stage 3 partitions the parameters
        model = TiedLM()
    if precision == "bf16":  # DeepSpeed casts the module to bf16: the engine trains the bf16 model
        config["bf16"] = {"enabled": True}
        wrapped = trainrt.RTModule(model)
    else:  # f32 parameters and gradients, the engine's matmuls in bf16
        wrapped = trainrt.RTModule(model, mixed_precision="bf16")
    client = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    engine, optimizer, _, _ = deepspeed.initialize(model=wrapped, optimizer=client, config=config)
    if engine_checks:
        assert FP16_Optimizer(optimizer) is optimizer
    norms, skipped = [], []
    for step, (ids, labels) in enumerate(_batches()):
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        loss = engine(ids[mine], labels[mine])
        if step == OVERFLOW_STEP and rank == 0:
            loss = loss * math.inf
        engine.backward(loss)
        engine.step()
        norms.append(float(engine.get_global_grad_norm()))
        skipped.append(optimizer.overflow)
        assert getattr(wrapped, "fallback_reason", None) is None, wrapped.fallback_reason
    deepspeed_zero.sum_of_squares = engine_pass
    return [safe_get_full_fp32_param(p).clone() for p in model.parameters()], norms, skipped, passes


def _plain_then_checked_rank(rank, world_size, stage, precision):
    os.environ["TRAINRT_FALLBACK_POLICY"] = "FALLBACK_DISABLE"  # an engine that fell back would prove nothing
    return _train(rank, stage, precision, False), _train(rank, stage, precision, True)


@pytest.mark.slow  # two processes importing DeepSpeed: ~40 s a case
@pytest.mark.parametrize("precision", ["bf16", "engine-bf16"])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_fp16_optimizer_of_a_zero_optimizer_trains_as_deepspeed_does(stage, precision):
    for plain, checked in run_on_ranks(_plain_then_checked_rank, stage, precision):
        (ref_params, ref_norms, ref_skipped, ref_passes), (params, norms, skipped, passes) = plain, checked
        assert ref_passes == []
        if stage == 3:
            # One sub-group (the default sub_group_size holds this model): per step one norm over the
            # rank's partition of every parameter, the overflow step's too, since stage 3 checks overflow
            # only in fp16 and the engine's -1 for an inf / NaN norm is what skips the step.
            assert passes == [len(params)] * STEPS
        else:
            # Per step the norm of the rank's partition; in bf16 also an overflow check before it, and
            # no norm after an overflow.
            assert len(passes) == (2 * STEPS - 1 if precision == "bf16" else STEPS) and all(n > 0 for n in passes)
        assert skipped == ref_skipped == [step == OVERFLOW_STEP for step in range(STEPS)]
        assert norms[OVERFLOW_STEP] == ref_norms[OVERFLOW_STEP] == math.inf
        clean = [s for s in range(STEPS) if s != OVERFLOW_STEP]
        assert [norms[s] for s in clean] == pytest.approx([ref_norms[s] for s in clean], rel=1e-6)
        assert all(ref_norms[s] > 0.05 for s in clean)  # clipping was active
        for p, r in zip(params, ref_params):
            assert p.dtype is torch.float32
            torch.testing.assert_close(p, r, rtol=1e-4, atol=1e-6)


def test_sum_of_squares_reads_bf16_and_f32_in_one_pass():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(1000, generator=gen).bfloat16(), torch.randn(7, 9, generator=gen), torch.zeros(0)]
    expected = sum((g.double() ** 2).sum().item() for g in grads)
    assert deepspeed_zero.sum_of_squares(grads) == pytest.approx(expected, rel=1e-12)
    assert deepspeed_zero.sum_of_squares([grads[1].t()]) == pytest.approx((grads[1].double() ** 2).sum().item())
    grads[0][3] = math.nan
    assert math.isnan(deepspeed_zero.sum_of_squares(grads))
    assert deepspeed_zero.sum_of_squares([]) == 0.0


class _OtherDeepSpeedOptimizer(torch.optim.SGD):
    """Stands for a DeepSpeed wrapper the engine's checks do not serve (BF16_Optimizer, DeepSpeed's FP16_Optimizer)."""


_OtherDeepSpeedOptimizer.__module__ = "deepspeed.runtime.bf16_optimizer"


class _DeepSpeedPlainOptimizer(torch.optim.SGD):
    """Stands for deepspeed.ops' optimizers (FusedAdam, DeepSpeedCPUAdam): wrapped as any other."""


_DeepSpeedPlainOptimizer.__module__ = "deepspeed.ops.adam.cpu_adam"


def test_other_deepspeed_optimizers_are_returned_unchanged_with_a_warning():
    inner = _OtherDeepSpeedOptimizer([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    with pytest.warns(UserWarning, match="keeps its own overflow check.*not a ZeRO stage 1, 2 or 3 optimizer"):
        assert FP16_Optimizer(inner) is inner
    with pytest.raises(TypeError, match="takes no options.*DeepSpeed config"):
        FP16_Optimizer(inner, max_grad_norm=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for plain in (torch.optim.SGD, _DeepSpeedPlainOptimizer):
            assert isinstance(FP16_Optimizer(plain([torch.nn.Parameter(torch.ones(2))], lr=0.1)), FP16_Optimizer)


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_offload_keeps_deepspeeds_checks_with_a_warning(stage):
    """ZeRO-Offload (stage 1 / 2 `cpu_offload`, stage 3 `offload_optimizer`) takes the norm while it
    copies gradients to the CPU: the optimizer comes back unchanged. Uninitialised optimizers with the
    flag DeepSpeed sets stand for the real ones (the refusal reads the flag only; a real offloading run
    is another ~40 s of DeepSpeed start-up on 2 ranks)."""
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    optimizer_type = DeepSpeedZeroOptimizer_Stage3 if stage == 3 else DeepSpeedZeroOptimizer
    optimizer = optimizer_type.__new__(optimizer_type)
    setattr(optimizer, "offload_optimizer" if stage == 3 else "cpu_offload", True)
    with pytest.warns(UserWarning, match="keeps its own overflow check.*ZeRO-Offload"):
        assert FP16_Optimizer(optimizer) is optimizer
    assert "get_grad_norm_direct" not in vars(optimizer)
