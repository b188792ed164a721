"""transformers' Trainer on 2 ranks (gloo, the way torchrun runs it: accelerate wraps the model in
DDP) with the model in the engine, against the plain Trainer on the same 2 ranks: the same logged
losses within 1e-4 relative, and the ranks' parameters identical at the end; and against RTTrainer in
one process on the same global batch (2 x 4 rows against 8: accelerate gives rank r the r-th batch of
each pair of the same sampler order, DDP averages the gradients, the logged loss is the ranks' mean)."""

import pytest
import torch

from trainrt.testing import run_on_ranks

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = [pytest.mark.slow,  # two processes importing transformers: ~30 s
              pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def _trainer_rank(rank, world_size, tmp):
    from transformers import Trainer, TrainingArguments

    from test_hf_trainer import arguments, make_data, make_model
    from trainrt.hf import RTTrainer, RTTrainingArguments

    import pathlib

    out = {}
    for name, trainer_cls, args_cls in (("plain", Trainer, TrainingArguments), ("trainrt", RTTrainer, RTTrainingArguments)):
        args = arguments(args_cls, pathlib.Path(tmp) / name, ddp_backend="gloo")
        trainer = trainer_cls(model=make_model("gpt2"), args=args, train_dataset=make_data("gpt2", 16, 1))
        trainer.train()
        model = trainer.model_wrapped
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
        if name == "trainrt":
            assert trainer.model.fallback_reason is None
        out[name] = ([h["loss"] for h in trainer.state.log_history if "loss" in h],
                     [p.detach().clone() for p in trainer.model.parameters()])
    return out


def test_trainer_under_ddp_matches_the_plain_trainer_and_one_process(tmp_path, monkeypatch):
    from test_hf_trainer import arguments, make_data, make_model
    from trainrt.hf import RTTrainer, RTTrainingArguments

    results = run_on_ranks(_trainer_rank, str(tmp_path))
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    single = RTTrainer(model=make_model("gpt2"), train_dataset=make_data("gpt2", 16, 1),
                       args=arguments(RTTrainingArguments, tmp_path / "single", per_device_train_batch_size=8))
    single.train()
    single_losses = [h["loss"] for h in single.state.log_history if "loss" in h]
    assert single.model.fallback_reason is None
    for rank in results:
        plain, ours = rank["plain"][0], rank["trainrt"][0]
        assert len(ours) == len(plain) > 0
        for a, b in zip(ours, plain):
            assert a == pytest.approx(b, rel=1e-4), (ours, plain)
        assert len(single_losses) == len(ours)
        for a, b in zip(ours, single_losses):
            assert a == pytest.approx(b, rel=1e-4), (ours, single_losses)
    for a, b in zip(results[0]["trainrt"][1], results[1]["trainrt"][1]):
        assert torch.equal(a, b)
