"""The loss's gradient through a language model's head made in the forward (saved-value rule 7,
plan/loss_gradient_in_forward.h) and run as one LinearSoftmaxCrossEntropy node over blocks of rows
(passes/linear_cross_entropy_fusion.h), against eager with fallback disabled: a model that returns
its loss alone, with a tied or a separate head and a bias; a loss scaled before backward (a loss
gradient other than one); a retained graph backed up twice; and a Hugging Face model whose logits
come back beside the loss, with and without a gradient through them.
"""

import copy

import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trainrt

VOCAB, DIM = 96, 16


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class _LossOnlyLM(nn.Module):
    """Embedding, one GELU layer, LayerNorm and a head over more classes than features."""

    def __init__(self, tied: bool, bias: bool):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layer = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=bias)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids, labels):
        h = self.norm(F.gelu(self.layer(self.embed(ids))))
        return F.cross_entropy(self.head(h).view(-1, VOCAB), labels.view(-1), ignore_index=-100)


def _batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, VOCAB, (4, 24), generator=g)
    labels = ids.roll(-1, dims=1).masked_fill(torch.rand(ids.shape, generator=g) > 0.8, -100)
    return ids, labels


def _train(model, steps=3, scale=1.0):
    """SGD with momentum (a parameter whose true gradient is zero stays put on both sides)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model(*_batch(step))
        (loss * scale).backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def _programs(rt):
    return [e.programs for engines in rt._engines.values() for e in engines][0]


def _ops(graph_bytes):
    return [n.op_type for n in onnx.load_from_string(graph_bytes).graph.node]


@pytest.mark.parametrize("tied, bias, scale", [(True, False, 1.0), (False, True, 1.0), (True, False, 0.25)],
                         ids=["tied", "separate-with-bias", "tied-loss-scaled"])
def test_loss_only_lm_matches_eager_with_the_head_in_one_forward_node(tied, bias, scale):
    torch.manual_seed(0)
    model = _LossOnlyLM(tied, bias)
    eager, ours = copy.deepcopy(model), trainrt.RTModule(copy.deepcopy(model))
    want, got = _train(eager, scale=scale), _train(ours, scale=scale)
    assert ours.fallback_reason is None
    for w, g in zip(want, got):
        assert abs(w - g) <= 1e-5 * abs(w)
    for (name, p), (_, q) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)
    programs = _programs(ours)
    forward, backward = _ops(programs.forward_graph_onnx()), _ops(programs.backward_graph_onnx())
    assert forward.count("LinearSoftmaxCrossEntropy") == 1
    assert "SoftmaxCrossEntropyLoss" not in forward and "SoftmaxCrossEntropyLossGrad" not in backward
    # What the forward saves is no (tokens, vocabulary) value: less than the log-probabilities alone.
    tokens = 4 * 24
    assert programs.memory_stats()["forward"]["saved_bytes"] < tokens * VOCAB * 4


transformers = pytest.importorskip("transformers")


def _gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=DIM, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize("through_logits", [False, True], ids=["loss-only", "loss-and-logits"])
def test_hf_logits_returned_keep_their_own_gradient(through_logits):
    """GPT2LMHeadModel returns its logits. The backward reads no logits either way (rule 7 moved the
    log_prob recompute into the forward); with a gradient through the logits too, their products run in
    the backward, and the gradients match eager's."""
    model = _gpt2()
    eager, ours = copy.deepcopy(model), trainrt.RTModule(copy.deepcopy(model))
    ids, labels = _batch(0)
    grads = []
    for m in (eager, ours):
        out = m(input_ids=ids, labels=labels)
        total = out.loss + (0.1 * out.logits.square().mean() if through_logits else 0)
        total.backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
    assert ours.fallback_reason is None
    for name, want in grads[0].items():
        torch.testing.assert_close(grads[1][name], want, rtol=1e-4, atol=1e-6, msg=name)
    programs = _programs(ours)
    backward = onnx.load_from_string(programs.backward_graph_onnx()).graph
    assert "SoftmaxCrossEntropyLossGrad" not in [n.op_type for n in backward.node]
    forward = onnx.load_from_string(programs.forward_graph_onnx()).graph
    logits = [o.name for o in forward.output
              if len(o.type.tensor_type.shape.dim) == 3 and o.type.tensor_type.shape.dim[2].dim_value == VOCAB]
    assert len(logits) == 1
    assert logits[0] not in {i.name for i in backward.input}  # nothing keeps the logits for the backward


def test_a_retained_graph_backs_up_twice_with_different_loss_gradients():
    """retain_graph keeps the forward's gradient parts for dL = 1; each backward scales them by its own
    dL (here 1, then 0.5), and the accumulated gradients equal eager's."""
    torch.manual_seed(0)
    model = _LossOnlyLM(tied=True, bias=True)
    eager, ours = copy.deepcopy(model), trainrt.RTModule(copy.deepcopy(model))
    for m in (eager, ours):
        loss = m(*_batch(0))
        loss.backward(retain_graph=True)
        (loss * 0.5).backward()
    assert ours.fallback_reason is None
    for (name, p), (_, q) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
