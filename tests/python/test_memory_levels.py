"""TRAINRT_MEMORY_OPT_LEVEL: the backward recomputes inside each repeated layer instead of saving
(capture/layers.py finds the layers, src/trainrt/plan/layer_recompute.h decides). Gradients are the
same bits at every level, dropout masks included; level 2 saves less than level 0."""

import pytest
import torch

import trainrt
from trainrt.bench.models import GPT
from trainrt.capture.layers import repeated_layers


@pytest.fixture(autouse=True)
def _engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _batch():
    g = torch.Generator().manual_seed(3)
    data = torch.randint(0, 64, (4, 17), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _run(monkeypatch, level: str, make):
    monkeypatch.setenv("TRAINRT_MEMORY_OPT_LEVEL", level)
    torch.manual_seed(0)
    model = trainrt.RTModule(make())
    losses = []
    for _ in range(2):
        loss = model(*_batch())
        loss.backward()
        losses.append(loss.item())
    assert model.fallback_reason is None
    engine = model.engines[0]
    saved = engine.programs.memory_stats()["forward"]["saved_bytes"]
    return losses, [p.grad for p in model.parameters()], saved, engine


def _gpt():
    return GPT(vocab=64, dim=32, heads=2, seq=16, layers=3)


def test_levels_give_the_same_gradient_bits_and_level_2_saves_less(monkeypatch):
    losses0, grads0, saved0, engine0 = _run(monkeypatch, "0", _gpt)
    assert len(set(engine0.captured.layers.values())) == 3
    assert engine0.programs.layers_recomputed == 0
    for level in ("1", "2"):
        losses, grads, saved, engine = _run(monkeypatch, level, _gpt)
        assert engine.programs.layers_recomputed == 3 and engine.programs.nodes_recomputed > 0
        assert losses == losses0
        assert all(torch.equal(a, b) for a, b in zip(grads, grads0)), level
        if level == "2":
            assert saved < 0.6 * saved0, (saved, saved0)


def test_dropout_inside_layers_keeps_its_masks(monkeypatch):
    """Random nodes are never recomputed: with dropout in every block, the same seed gives the same
    losses and gradient bits at levels 0 and 2."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.2)

    def make():
        return transformers.GPT2LMHeadModel(config)

    class LossOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = make()

        def forward(self, ids, labels):
            return self.lm(input_ids=ids, labels=labels).loss

    losses0, grads0, _, _ = _run(monkeypatch, "0", LossOnly)
    losses2, grads2, _, engine = _run(monkeypatch, "2", LossOnly)
    assert engine.programs.layers_recomputed == 2
    # The recomputed Reshapes' targets are shape arithmetic handed over from the forward, planned
    # for like constants: nothing in the backward is sized at run time (heap storage each run).
    assert engine.programs.memory_stats()["backward"]["peak_dynamic_bytes"] == 0
    assert losses2 == losses0
    assert all(torch.equal(a, b) for a, b in zip(grads2, grads0))


def test_repeated_layers_are_the_blocks_of_a_module_list():
    model = _gpt()
    ep = torch.export.export(model, _batch(), strict=False)
    layers = repeated_layers(ep.graph.nodes)
    assert sorted(set(layers.values())) == [0, 1, 2]
    paths = {next(p for p, _ in n.meta["nn_module_stack"].values() if p.startswith("blocks.")) for n in layers}
    assert paths == {"blocks.0", "blocks.1", "blocks.2"}


def test_a_bad_level_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv("TRAINRT_MEMORY_OPT_LEVEL", "3")
    with pytest.raises(ValueError, match="choose 0, 1 or 2"):
        trainrt.RTModule(_gpt())
