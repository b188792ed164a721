"""Branches on tensor values (capture/branch_checks.py): a model whose forward branches on data, as
DeBERTa's classifier does on `label_index.size(0) > 0`, is captured on the branch its batch takes,
and every call checks that it takes the same one. A batch that goes the other way runs on a capture
of its own branch (made once, then reused), with its first results dropped before any buffer or
caller sees them. Before, such models failed to export and fell back to PyTorch. Fallback is
disabled: every result here is the engine's, compared with eager step after step.
"""

import copy

import pytest
import torch
from torch import nn

import trainrt
from trainrt.capture import capture


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class SelectedRows(nn.Module):
    """DeBERTa's pattern: a loss over the labelled rows, or zero when no row is labelled."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(4)  # running stats: a dropped call must not move them
        self.proj = nn.Linear(4, 3)

    def forward(self, x, labels):  # x (B, 4), labels (B,) with -100 for unlabelled rows
        logits = self.proj(self.norm(x))
        rows = (labels >= 0).nonzero().squeeze(-1)
        if rows.size(0) > 0:
            return nn.functional.cross_entropy(logits[rows], labels[rows])
        return logits.sum() * 0


class ItemThreshold(nn.Module):
    """Reformer's pattern: a branch on a number read with .item()."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask):  # x (B, 4), mask (B,) of 0 / 1
        h = self.proj(x)
        if mask.sum().item() < 3:
            return h.tanh().sum()
        return (h * h).sum()


class Doubled(torch.autograd.Function):
    """A user Function with its own backward (kept one PythonOp node): 3x the true gradient."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 6


class FunctionThenBranch(SelectedRows):
    """A user Function before a branch on data: export runs the Function on real tensors to decide."""

    def forward(self, x, labels):
        return super().forward(Doubled.apply(x), labels)


def _steps_match_eager(model: nn.Module, batches: list[tuple]) -> trainrt.RTModule:
    """SGD-momentum steps through RTModule and eager: equal losses, gradients, parameters and buffers."""
    eager = copy.deepcopy(model)
    engine = trainrt.RTModule(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_r = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for inputs in batches:
        ours = [t.detach().requires_grad_(t.requires_grad) for t in inputs]  # each side its own input grads
        expected = eager(*inputs)
        expected.backward()
        loss = engine(*ours)
        loss.backward()
        assert engine.fallback_reason is None
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for t, u in zip(ours, inputs):
            if t.requires_grad:
                torch.testing.assert_close(t.grad, u.grad, rtol=1e-5, atol=1e-6, msg="input gradient")
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
        for opt in (opt_e, opt_r):
            opt.step()
            opt.zero_grad()
    for (name, b), c in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, c, msg=name)
    return engine


def _labels(*rows):
    return torch.tensor(rows)


def test_a_batch_that_takes_the_other_branch_runs_on_its_own_capture(trainrt_log, monkeypatch):
    monkeypatch.setenv("TRAINRT_LOG_LEVEL", "INFO")
    trainrt_log.set_level("INFO", logger="trainrt")
    torch.manual_seed(0)
    batches = [(torch.randn(5, 4), labels) for labels in
               (_labels(1, -100, 2, 0, -100), _labels(*[-100] * 5), _labels(0, 1, 2, 0, 1), _labels(*[-100] * 5),
                _labels(-100, 1, -100, -100, -100))]
    engine = _steps_match_eager(SelectedRows(), batches)
    assert engine.num_captures == 2  # one per branch, each reused after
    assert "branches on tensor values" in trainrt_log.text
    assert "propagate_real_tensors" not in trainrt_log.text  # torch's own log of each decision is quiet
    assert "0 < u0, checked each call" in trainrt_log.text  # the start-up table's row
    assert "a branch on tensor values went the other way (0 < u" in trainrt_log.text


def test_a_user_function_before_the_branch_keeps_its_backward():
    """Deciding the branch runs the Function's forward on real tensors while Function.apply is routed
    to the PythonOp (before: endless recursion, Reformer's reversible layers)."""
    torch.manual_seed(0)
    batches = [(torch.randn(5, 4, requires_grad=True), labels) for labels in
               (_labels(1, -100, 2, 0, -100), _labels(*[-100] * 5), _labels(0, 1, 2, 0, 1))]
    _steps_match_eager(FunctionThenBranch(), batches)


def test_a_branch_on_an_item_is_checked():
    torch.manual_seed(0)
    batches = [(torch.randn(6, 4), torch.tensor(mask)) for mask in
               ([1, 0, 0, 0, 0, 1], [1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0])]
    engine = _steps_match_eager(ItemThreshold(), batches)
    assert engine.num_captures == 2


def test_without_grad_the_checks_hold_too():
    torch.manual_seed(0)
    model = ItemThreshold()
    engine = trainrt.RTModule(copy.deepcopy(model))
    with torch.no_grad():
        for mask in ([1, 0, 0, 0, 0, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]):
            x, m = torch.randn(6, 4), torch.tensor(mask)
            torch.testing.assert_close(engine(x, m), model(x, m))


def test_the_capture_lists_its_checks_and_a_model_without_data_branches_has_none():
    captured = capture(SelectedRows(), (torch.randn(5, 4), _labels(1, -100, 2, 0, -100)))
    assert [condition for _, condition in captured.branch_checks] == ["0 < u0"]
    assert [o.name for o in captured.model.graph.output][-1] == captured.branch_checks[0][0]
    plain = capture(nn.Linear(4, 3), (torch.randn(5, 4),))
    assert plain.branch_checks == []


@pytest.mark.slow
def test_deberta_v2_classifier_trains_as_eager_when_a_batch_has_no_label():
    """DeBERTa-v2's classifier computes its loss over `labels >= 0` rows only when there are some."""
    transformers = pytest.importorskip("transformers")
    config = transformers.DebertaV2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=32, num_labels=3,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.DebertaV2ForSequenceClassification(config)
    g = torch.Generator().manual_seed(1)

    def batch(labels):
        ids = torch.randint(0, 64, (3, 10), generator=g)
        return ids, torch.ones_like(ids), torch.tensor(labels)

    eager = copy.deepcopy(model)
    engine = trainrt.RTModule(model)
    for ids, mask, labels in (batch([0, 2, 1]), batch([-100, -100, -100]), batch([1, -100, 2]), batch([0, 0, 1])):
        expected = eager(input_ids=ids, attention_mask=mask, labels=labels)
        got = engine(input_ids=ids, attention_mask=mask, labels=labels)
        assert engine.fallback_reason is None
        torch.testing.assert_close(got.loss, expected.loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    assert engine.num_captures == 2


def test_a_capture_that_fails_its_own_check_is_not_run(monkeypatch):
    """A decision export made on values the engine computes otherwise (real-tensor propagation reads
    memory that torch.empty left as it was) fails on the very call it was made for: the model is not
    run on it, and the fallback policy decides (here: PyTorch, saying why; disabled: an error)."""
    import sympy

    monkeypatch.setattr("trainrt.capture.translator.branch_conditions", lambda ep: [sympy.false])
    monkeypatch.setattr("trainrt.shared_captures.find", lambda key, shapes, exclude=(): None)  # captured anew
    monkeypatch.delenv("TRAINRT_FALLBACK_POLICY")
    torch.manual_seed(0)
    model = SelectedRows()
    engine = trainrt.RTModule(copy.deepcopy(model))
    x, labels = torch.randn(5, 4), _labels(1, -100, 2, 0, -100)
    torch.testing.assert_close(engine(x, labels), model(x, labels))
    assert "fails its own branch check False" in engine.fallback_reason
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="fails its own branch check"):
        trainrt.RTModule(copy.deepcopy(model))(x, labels)
