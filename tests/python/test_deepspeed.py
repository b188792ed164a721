"""DeepSpeed ZeRO stages 1, 2 and 3 around RTModule on 2 ranks (gloo, DeepSpeed's CPU accelerator)
against one eager process on the same global batches: parameters within 1e-4 relative after each
run, on a model with tied embedding and output weights and a LayerNorm; with DeepSpeed's own AdamW,
a client torch AdamW and trainrt's FusedAdam. Stage 3 partitions the parameters (deepspeed.zero.Init):
RTModule captures with the full shapes and gathers around its engine calls (trainrt/zero3.py)."""

import pytest
import torch

from test_ddp import PER_RANK, TiedLM, _batches, _eager_reference
from trainrt.testing import run_on_ranks

deepspeed = pytest.importorskip("deepspeed")

pytestmark = pytest.mark.slow  # two processes importing DeepSpeed: ~20 s a case


def _deepspeed_steps(engine, rank):
    """One DeepSpeed step per global batch, on this rank's share of it; yields after each."""
    for ids, labels in _batches():
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        engine.backward(engine(ids[mine], labels[mine]))
        engine.step()
        yield


def _zero_rank(rank, world_size, stage, optimizer):
    import deepspeed

    import trainrt

    # DeepSpeed clips the gradient norm at 1.0 unless told otherwise; the eager reference does not.
    config = {"train_micro_batch_size_per_gpu": PER_RANK, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "gradient_clipping": 0.0}
    if optimizer == "deepspeed":
        config["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}}
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config, enabled=stage == 3):
        model = TiedLM()
    client = None
    if optimizer == "torch":
        client = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    elif optimizer == "fused_adam":  # DeepSpeed asks to be told an optimizer it does not know is meant
        client = trainrt.optim.FusedAdam(model.parameters(), lr=1e-2, weight_decay=0.01)
        config["zero_allow_untested_optimizer"] = True
    wrapped = trainrt.RTModule(model)
    engine, _, _, _ = deepspeed.initialize(model=wrapped, optimizer=client, config=config)
    for _ in _deepspeed_steps(engine, rank):
        assert wrapped.fallback_reason is None, wrapped.fallback_reason
    with deepspeed.zero.GatheredParameters(list(model.parameters()), enabled=stage == 3):
        return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("stage, optimizer", [(1, "deepspeed"), (2, "fused_adam"), (3, "deepspeed"), (3, "torch")])
def test_zero_stage_with_rtmodule_matches_one_eager_process(stage, optimizer):
    expected = _eager_reference("adamw", 1)
    for params in run_on_ranks(_zero_rank, stage, optimizer):
        assert len(params) == len(expected)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e, rtol=1e-4, atol=1e-6)


def _bf16_rank(rank, world_size, stage):
    """DeepSpeed with `bf16` on (it casts the module to bf16 and keeps f32 master weights), the same
    run once around the eager module and once around RTModule: each run's f32 master weights."""
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param

    import trainrt

    runs = []
    for engine_module in (False, True):
        config = {"train_micro_batch_size_per_gpu": PER_RANK, "gradient_accumulation_steps": 1,
                  "zero_optimization": {"stage": stage}, "gradient_clipping": 0.0, "bf16": {"enabled": True},
                  "zero_allow_untested_optimizer": True}
        torch.manual_seed(0)
        with deepspeed.zero.Init(config_dict_or_path=config, enabled=stage == 3):
            model = TiedLM()
        wrapped = trainrt.RTModule(model) if engine_module else model
        client = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        engine, _, _, _ = deepspeed.initialize(model=wrapped, optimizer=client, config=config)
        for _ in _deepspeed_steps(engine, rank):
            pass
        if engine_module:
            assert wrapped.fallback_reason is None, wrapped.fallback_reason
        runs.append([safe_get_full_fp32_param(p).clone() for p in model.parameters()])
    return runs


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_bf16_zero_stage_with_rtmodule_trains_as_with_the_eager_module(stage):
    """The engine runs the bf16 module DeepSpeed made: the master weights follow the eager module's
    to within what bf16 gradients allow (an ulp of bf16 is 0.4% of a gradient; SGD, lr 0.1, 3 momentum
    steps move a weight by 0.1 to 0.5)."""
    for eager, ours in run_on_ranks(_bf16_rank, stage):
        for e, o in zip(eager, ours):
            assert o.dtype is torch.float32
            torch.testing.assert_close(o, e, rtol=0, atol=2e-3)  # 7e-4 seen; a wrong gradient moves 1e-2 or more
