"""TRAINRT_MEMORY_BUDGET_MB (python/trainrt/memory_budget.py): the least recompute whose trial peak
fits, trained as eager; a warning when none fits; the trial changes no parameter or buffer."""

import logging

import pytest
import torch

import trainrt
from trainrt.bench.models import GPT


@pytest.fixture(autouse=True)
def _engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _batch(step):
    g = torch.Generator().manual_seed(step)
    data = torch.randint(0, 64, (4, 17), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _gpt():
    torch.manual_seed(0)
    return GPT(vocab=64, dim=32, heads=2, seq=16, layers=3)


def _train(model, steps=3):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(*_batch(step))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _choice(monkeypatch, mb):
    monkeypatch.setenv("TRAINRT_MEMORY_BUDGET_MB", str(mb))
    model = trainrt.RTModule(_gpt())
    losses = _train(model)
    assert model.fallback_reason is None
    return model._memory_plan, losses, model.engines[0]


def test_the_first_plan_that_fits_is_kept_and_trains_as_eager(monkeypatch):
    eager = _train(_gpt())
    roomy, losses, roomy_engine = _choice(monkeypatch, 1000)
    assert roomy.fits and roomy.kept == "as set" and list(roomy.peaks) == ["as set"]
    assert losses == pytest.approx(eager, rel=1e-5)
    # a budget between the plans' peaks: the settings as given miss it, a later plan fits
    every, _, _ = _choice(monkeypatch, 0.001)
    smallest = min(every.peaks.values())
    assert smallest < 0.95 * every.peaks["as set"]  # level 0 is lean already (0.91x here): a gap to budget in
    tight, losses, engine = _choice(monkeypatch, (every.peaks["as set"] + smallest) / 2 / 2**20)
    assert tight.fits and tight.kept != "as set"
    assert tight.peaks["as set"] > tight.budget >= tight.peaks[tight.kept]
    assert losses == pytest.approx(eager, rel=1e-5)
    saved = engine.programs.memory_stats()["forward"]["saved_bytes"]
    assert saved < roomy_engine.programs.memory_stats()["forward"]["saved_bytes"]


def test_when_nothing_fits_the_smallest_is_kept_with_a_warning(monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="trainrt"):
        choice, losses, _ = _choice(monkeypatch, 0.001)
    assert not choice.fits and choice.peaks[choice.kept] == min(choice.peaks.values())
    assert len(choice.peaks) >= 3
    warning = next(r.getMessage() for r in caplog.records if "no memory plan fits" in r.getMessage())
    assert choice.kept in warning
    assert losses == pytest.approx(_train(_gpt()), rel=1e-5)


def test_the_trial_step_changes_no_parameter_or_buffer(monkeypatch):
    """BatchNorm's running statistics after one training forward are eager's: the trial steps did
    not update them, nor any parameter."""
    monkeypatch.setenv("TRAINRT_MEMORY_BUDGET_MB", "0.001")

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                   torch.nn.Linear(16, 2))

    eager, wrapped = make(), trainrt.RTModule(make())
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
    eager(x).sum().backward()
    wrapped(x).sum().backward()
    assert wrapped.fallback_reason is None and wrapped._memory_plan is not None
    for (name, a), b in zip(eager.state_dict().items(), wrapped.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6), name
    for a, b in zip(eager.parameters(), wrapped.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", ["0", "-5", "lots"])
def test_a_bad_budget_is_refused(monkeypatch, bad):
    monkeypatch.setenv("TRAINRT_MEMORY_BUDGET_MB", bad)
    with pytest.raises(ValueError, match="TRAINRT_MEMORY_BUDGET_MB"):
        trainrt.RTModule(torch.nn.Linear(2, 2))
