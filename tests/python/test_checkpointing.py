"""Activation checkpointing is captured into the engine, not handed back to PyTorch: the
checkpointed block's ops are engine nodes (no PythonOp), and losses and gradients equal eager's.
torch.utils.checkpoint in both modes, checkpoint_sequential, and HF gradient_checkpointing_enable."""

import onnx
import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import trainrt


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Checkpointed(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 2)
        self.mode = mode

    def forward(self, x):
        if self.mode == "sequential":
            h = checkpoint_sequential(self.block, 2, x, use_reentrant=False)
        else:
            h = checkpoint(self.block, x, use_reentrant=self.mode == "reentrant")
        return self.head(h)


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant", "sequential"])
def test_checkpointed_block_runs_in_the_engine_with_eagers_gradients(mode):
    torch.manual_seed(0)
    eager = Checkpointed(mode)
    model = trainrt.RTModule(Checkpointed(mode))
    model.load_state_dict(eager.state_dict())
    for _ in range(2):
        x = torch.randn(5, 3, requires_grad=True)  # reentrant checkpoint needs an input that requires grad
        for m in (eager, model):
            m.zero_grad()
            m(x).pow(2).sum().backward()
        for pe, pm in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6)
    graph = model.engines[0].captured.model.graph
    assert model.fallback_reason is None
    assert not [n for n in graph.node if n.op_type == "PythonOp"]
    assert sum(n.op_type == "Gemm" for n in graph.node) == 3


def test_hf_llama_with_gradient_checkpointing_matches_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(config)
    plain = transformers.LlamaForCausalLM(config)
    plain.load_state_dict(eager.state_dict())
    for m in (eager, plain):
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.train()
    model = trainrt.RTModule(plain)
    ids = torch.randint(0, 100, (2, 12))
    losses = []
    for m in (eager, model):
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    assert model.fallback_reason is None
    for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
        if pe.grad is not None:
            torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=name)


class Stack(nn.Module):
    """Four residual MLP blocks, each checkpointed (or not)."""

    def __init__(self, checkpointed: bool, reentrant: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
                                    for _ in range(4))
        self.checkpointed, self.reentrant = checkpointed, reentrant

    def forward(self, x):
        for block in self.blocks:
            x = x + (checkpoint(block, x, use_reentrant=self.reentrant) if self.checkpointed else block(x))
        return x.pow(2).mean()


def _saved_bytes(model) -> int:
    """What the engine's forward hands to its backward (its saved values, a few int64 shapes among them)."""
    return model.engines[0].programs.memory_stats()["forward"]["saved_bytes"]


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_recomputes_the_blocks_and_saves_their_inputs_only(reentrant):
    torch.manual_seed(0)
    eager = Stack(True, reentrant)
    plain, checkpointed = trainrt.RTModule(Stack(False)), trainrt.RTModule(Stack(True, reentrant))
    for m in (plain, checkpointed):
        m.load_state_dict(eager.state_dict())
    x = torch.randn(16, 32, requires_grad=True)
    for m in (eager, plain, checkpointed):
        m(x).backward()
    for pe, pp, pc in zip(eager.parameters(), plain.parameters(), checkpointed.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(pc.grad, pp.grad, rtol=1e-6, atol=1e-7)
    assert checkpointed.fallback_reason is None
    # Saved: each block's input (16 x 32 f32, the residual stream) and a few shapes, not its 16 x 128
    # activations.
    assert _saved_bytes(checkpointed) <= 4 * 16 * 32 * 4 + 128
    assert _saved_bytes(checkpointed) < _saved_bytes(plain) / 4
    backward = onnx.load_from_string(checkpointed.engines[0].programs.backward_graph_onnx())
    assert sum("/recompute" in n.name for n in backward.graph.node) >= 4 * 3


def test_hf_gradient_checkpointing_lowers_what_the_engine_saves():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(0, 100, (2, 16))
    saved, losses = {}, {}
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config)
        if checkpointed:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        rt = trainrt.RTModule(model)
        loss = rt(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        assert rt.fallback_reason is None
        saved[checkpointed], losses[checkpointed] = _saved_bytes(rt), loss.detach()
    torch.testing.assert_close(losses[True], losses[False])
    assert saved[True] < 0.75 * saved[False]


def test_gradient_checkpointing_enabled_after_a_capture_captures_again(monkeypatch):
    """HF's gradient_checkpointing_enable() called on the RTModule after a first step: the next step
    captures again and its backward recomputes the blocks (they were not marked in the old capture)."""
    import transformers

    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=16, use_cache=False)
    rt = trainrt.RTModule(transformers.GPT2LMHeadModel(config))
    ids = torch.randint(0, 64, (2, 8))
    rt(input_ids=ids, labels=ids).loss.backward()
    assert all(e.programs.nodes_recomputed == 0 for e in rt.engines)
    rt.gradient_checkpointing_enable()
    rt(input_ids=ids, labels=ids).loss.backward()
    assert len(rt.engines) == 1 and rt.engines[0].programs.nodes_recomputed > 0
    rt.gradient_checkpointing_disable()
    rt(input_ids=ids, labels=ids).loss.backward()
    assert rt.engines[0].programs.nodes_recomputed == 0


@pytest.mark.parametrize("variable", ["TRAINRT_ALLOW_AUTOGRAD_CHECKPOINT", "ORTMODULE_ALLOW_AUTOGRAD_CHECKPOINT"])
def test_allow_autograd_checkpoint_0_saves_the_blocks_activations_as_without_checkpoint(variable, monkeypatch):
    torch.manual_seed(0)
    eager = Stack(True, False)
    plain = trainrt.RTModule(Stack(False))
    monkeypatch.setenv(variable, "0")
    kept = trainrt.RTModule(Stack(True, False))
    for m in (plain, kept):
        m.load_state_dict(eager.state_dict())
    x = torch.randn(16, 32, requires_grad=True)
    for m in (eager, plain, kept):
        m(x).backward()
    for pe, pk in zip(eager.parameters(), kept.parameters()):
        torch.testing.assert_close(pk.grad, pe.grad, rtol=1e-5, atol=1e-6)
    assert kept.fallback_reason is None
    assert _saved_bytes(kept) == _saved_bytes(plain)
    recomputed = [sum("/recompute" in n.name for n in onnx.load_from_string(
        m.engines[0].programs.backward_graph_onnx()).graph.node) for m in (plain, kept)]
    assert recomputed[1] == recomputed[0]  # the plain model's own cheap recompute, no more
