"""TRAINRT_MEMORY_OPT_CONFIG (ORTModule's MEMORY_OPT_CONFIG): the memory optimizer's recompute
subgraphs (src/trainrt/plan/recompute_subgraphs.h), the cheap ones by default, the rest on request.
Gradients are the same bits whatever is recomputed; what is recomputed is no longer saved."""

import logging

import pytest
import torch

import trainrt
from trainrt.bench.models import GPT

# The attention probabilities and the attention output of each block: products, on request only.
ATTENTION = "FusedMatMul+Mul+Where+Softmax+:1:-1,MatMul+Transpose+Reshape+:1:-1"


@pytest.fixture(autouse=True)
def _engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _batch(step):
    g = torch.Generator().manual_seed(step)
    data = torch.randint(0, 64, (4, 17), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _train(monkeypatch, config: str | None, steps: int = 3):
    """SGD with momentum, `steps` steps: the losses, the last gradients, the saved bytes, the patterns."""
    if config is None:
        monkeypatch.delenv("TRAINRT_MEMORY_OPT_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TRAINRT_MEMORY_OPT_CONFIG", config)
    torch.manual_seed(0)
    model = trainrt.RTModule(GPT(vocab=64, dim=32, heads=2, seq=16, layers=3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(*_batch(step))
        loss.backward()
        losses.append(loss.item())
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
    assert model.fallback_reason is None
    programs = model.engines[0].programs
    patterns = {p["pattern"]: p for p in programs.recompute_patterns}
    return losses, grads, programs.memory_stats()["forward"]["saved_bytes"], patterns


def test_the_default_recomputes_each_layer_norm_and_saves_less_than_keeping_them(monkeypatch):
    losses, grads, saved, patterns = _train(monkeypatch, None)
    norms = patterns["LayerNormalization+"]
    # 2 per block (the final one's output is saved no more: the head's gradient is made in the
    # forward, saved-value rule 7); the first block's reads the embeddings' sum, which is itself
    # recomputed by default (Gather+Gather+Add+), and the two together are not cheap
    assert norms["found"] == 6 and norms["applied"] == 5 and norms["cheap"] and not norms["config"]
    assert patterns["Gather+Gather+Add+"]["applied"] == 1
    assert patterns["FusedMatMul+Mul+Where+Softmax+"]["applied"] == 0  # a product: on request only
    kept_losses, kept_grads, kept_saved, kept = _train(monkeypatch, "LayerNormalization+:0:-1")
    assert kept["LayerNormalization+"]["applied"] == 0 and kept["LayerNormalization+"]["config"] == "0:-1"
    # each (4, 16, 32) f32 LayerNorm output, 8 KiB, is no longer saved
    assert kept_saved - saved >= norms["applied"] * 4 * 16 * 32 * 4
    assert losses == kept_losses
    assert all(torch.equal(a, b) for a, b in zip(grads, kept_grads))


def test_attention_recomputed_on_request_gives_the_same_bits_and_matches_eager(monkeypatch):
    losses, grads, saved, _ = _train(monkeypatch, None)
    more_losses, more_grads, more_saved, patterns = _train(monkeypatch, ATTENTION)
    assert patterns["FusedMatMul+Mul+Where+Softmax+"]["applied"] == 3
    assert patterns["MatMul+Transpose+Reshape+"]["applied"] == 3
    # per block the (4, 2, 16, 16) probabilities and the (4, 16, 32) attention output
    assert saved - more_saved >= 3 * (4 * 2 * 16 * 16 + 4 * 16 * 32) * 4
    assert more_losses == losses
    assert all(torch.equal(a, b) for a, b in zip(more_grads, grads))
    torch.manual_seed(0)
    eager = GPT(vocab=64, dim=32, heads=2, seq=16, layers=3)
    optimizer = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    for step, expected in enumerate(more_losses):
        optimizer.zero_grad()
        loss = eager(*_batch(step))
        loss.backward()
        assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
        optimizer.step()


def test_the_summary_is_logged_at_info_and_names_an_unmatched_pattern(monkeypatch, caplog):
    monkeypatch.setenv("TRAINRT_LOG_LEVEL", "INFO")
    with caplog.at_level(logging.INFO, logger="trainrt"):
        _, _, _, patterns = _train(monkeypatch, "NoSuchOp+:1:-1", steps=1)
    assert patterns["NoSuchOp+"]["found"] == 0
    summary = next(r.getMessage() for r in caplog.records if "MemoryOptimizer Summary" in r.getMessage())
    assert "LayerNormalization+" in summary and "default: cheap" in summary
    assert "NoSuchOp+" in summary and "(no occurrence)" in summary


def test_the_ortmodule_alias_is_read(monkeypatch):
    monkeypatch.setenv("ORTMODULE_MEMORY_OPT_CONFIG", "LayerNormalization+:0:-1")
    _, _, _, patterns = _train(monkeypatch, None, steps=1)
    assert patterns["LayerNormalization+"]["applied"] == 0


@pytest.mark.parametrize("bad", ["Gelu+", "Gelu+:1", "Gelu+:3:-1", "Gelu+:1:many", "Gelu+:2:-1"])
def test_a_malformed_config_is_refused_naming_the_item(monkeypatch, bad):
    monkeypatch.setenv("TRAINRT_MEMORY_OPT_CONFIG", bad)
    with pytest.raises(ValueError, match="Gelu"):
        trainrt.RTModule(torch.nn.Linear(2, 2))
