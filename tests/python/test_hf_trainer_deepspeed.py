"""transformers' Trainer with a DeepSpeed config (`deepspeed=`) on 2 ranks (gloo, DeepSpeed's CPU
accelerator) with the model in the engine, against the plain Trainer with the same config on the same 2
ranks: logged losses and grad_norm within 1e-4 relative, the model wrapped by a DeepSpeedEngine, and
RTModule running it (TRAINRT_FALLBACK_POLICY=FALLBACK_DISABLE on each rank). ZeRO-2 and ZeRO-3 (whose
partitioned parameters RTModule gathers around its engine calls) with DeepSpeed's AdamW from the config;
ZeRO-2 with no optimizer in the config, where each Trainer hands DeepSpeed its own (RTTrainer's FusedAdam,
the plain Trainer's torch AdamW). DeepSpeed clips (its gradient_clipping is the Trainer's max_grad_norm)."""

import pytest

from trainrt.testing import run_on_ranks

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("deepspeed")

pytestmark = [pytest.mark.slow,  # two processes importing DeepSpeed and transformers: ~40 s a case
              pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def _config(stage: int, deepspeed_optimizer: bool) -> dict:
    config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "gradient_clipping": "auto", "zero_optimization": {"stage": stage}}
    if deepspeed_optimizer:
        config["optimizer"] = {"type": "AdamW",
                               "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}}
    return config


def _trainer_rank(rank, world_size, tmp, stage, deepspeed_optimizer):
    import os
    import pathlib

    os.environ["TRAINRT_FALLBACK_POLICY"] = "FALLBACK_DISABLE"
    from transformers import Trainer, TrainingArguments

    from test_hf_trainer import arguments, make_data, make_model
    from trainrt.hf import RTTrainer, RTTrainingArguments

    out = {}
    for name, trainer_cls, args_cls, optim in (("plain", Trainer, TrainingArguments, "adamw_torch"),
                                               ("trainrt", RTTrainer, RTTrainingArguments, "adamw_trainrt_fused")):
        args = arguments(args_cls, pathlib.Path(tmp) / name, ddp_backend="gloo", optim=optim,
                         deepspeed=_config(stage, deepspeed_optimizer))
        trainer = trainer_cls(model=make_model("gpt2"), args=args, train_dataset=make_data("gpt2", 16, 1))
        trainer.train()
        history = [h for h in trainer.state.log_history if "loss" in h]
        optimizer = trainer.optimizer
        while hasattr(optimizer, "optimizer"):  # accelerate's and DeepSpeed's wrappers around the one that steps
            optimizer = optimizer.optimizer
        out[name] = {"losses": [h["loss"] for h in history], "grad_norms": [h["grad_norm"] for h in history],
                     "wrapped": type(trainer.model_wrapped).__name__, "model": type(trainer.model).__name__,
                     "fallback": getattr(trainer.model, "fallback_reason", None),
                     "captures": getattr(trainer.model, "num_captures", 0),
                     "optimizer": type(optimizer).__name__}
    return out


@pytest.mark.parametrize("stage, deepspeed_optimizer", [(2, True), (3, True), (2, False)])
def test_trainer_with_a_deepspeed_config_matches_the_plain_trainer(stage, deepspeed_optimizer, tmp_path):
    for rank in run_on_ranks(_trainer_rank, str(tmp_path), stage, deepspeed_optimizer):
        plain, ours = rank["plain"], rank["trainrt"]
        assert ours["wrapped"] == plain["wrapped"] == "DeepSpeedEngine"
        assert ours["model"] == "RTModule" and ours["fallback"] is None and ours["captures"] >= 1
        assert len(ours["losses"]) == len(plain["losses"]) > 0
        for key in ("losses", "grad_norms"):
            for a, b in zip(ours[key], plain[key]):
                assert a == pytest.approx(b, rel=1e-4), (key, ours[key], plain[key])
        # DeepSpeed's AdamW from the config (torch_adam: torch's), else each Trainer's own
        assert (ours["optimizer"], plain["optimizer"]) == (("AdamW", "AdamW") if deepspeed_optimizer
                                                           else ("FusedAdam", "AdamW"))
