"""Shape guards (capture/shape_guards.py): a capture serves only the input sizes its trace's branches
hold for. torch.export records `if seq % 2 == 0` or `if x.size(0) <= y.size(0)` as a guard that its
range constraints do not carry; before, the capture ran the traced branch for any size (a silently
wrong answer). Now the guard is checked whenever the shapes change, and a size that breaks it is
captured again, with the reason logged. Fallback is disabled: every result here is the engine's.
"""

import copy

import pytest
import torch
from torch import nn

import trainrt
from trainrt.capture import capture
from trainrt.capture.shape_guards import check_size_expression, failed_guard


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class ParityBranch(nn.Module):
    """Takes another branch for odd sequence lengths: the guard is `(s1 % 2) == 0`, no range."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):  # x (B, S, 4)
        h = self.proj(x)
        if x.shape[1] % 2 == 0:
            return (h * 2).sum()
        return h.tanh().sum()


class PairBranch(nn.Module):
    """Branches on a relation of two inputs' sizes: the guard is `s0 <= s2`."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, memory):  # x (B, 4), memory (M, 4)
        if x.shape[0] <= memory.shape[0]:
            return (self.proj(x) @ memory.t()).sum()
        return self.proj(x).relu().sum() * 3


class ChunkLoop(nn.Module):
    """Qwen3.5's chunked loop: unrolled as often as the traced length needs, a range guard (<= 64)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):  # x (B, S, 4)
        chunks = (x.shape[1] + 63) // 64
        h = self.proj(x)
        return torch.cat([h[:, i * 64:(i + 1) * 64] * (i + 1) for i in range(chunks)], 1).sum()


def _steps_match_eager(model: nn.Module, batches: list[tuple]) -> trainrt.RTModule:
    """Loss and gradients of each batch through RTModule equal eager's."""
    eager = copy.deepcopy(model)
    engine = trainrt.RTModule(model)
    for inputs in batches:
        for m in (eager, engine):
            m.zero_grad()
        expected = eager(*inputs)
        expected.backward()
        loss = engine(*inputs)
        loss.backward()
        assert engine.fallback_reason is None
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=name)
    return engine


def test_a_size_that_breaks_the_traced_branch_is_captured_again(trainrt_log, monkeypatch):
    monkeypatch.setenv("TRAINRT_LOG_LEVEL", "INFO")
    trainrt_log.set_level("INFO", logger="trainrt")
    torch.manual_seed(0)
    _steps_match_eager(ParityBranch(), [(torch.randn(2, n, 4),) for n in (6, 7, 8, 9, 7)])
    assert "(s" in trainrt_log.text and "% 2) == 0" in trainrt_log.text
    assert "input 0 dim 1 = 7 break" in trainrt_log.text
    # The start-up table names the condition each capture holds for: the even lengths', then the odd ones'.
    rows = [line for line in trainrt_log.text.splitlines() if "size conditions (shape guards)" in line]
    assert len(rows) == 2 and rows[0].endswith("% 2) == 0") and rows[1].endswith("% 2) != 0"), rows


def test_a_guard_between_two_inputs_is_checked():
    torch.manual_seed(0)
    batches = [(torch.randn(3, 4), torch.randn(5, 4)), (torch.randn(6, 4), torch.randn(5, 4)),
               (torch.randn(2, 4), torch.randn(5, 4))]
    _steps_match_eager(PairBranch(), batches)


def test_sizes_that_keep_the_branch_reuse_the_capture():
    """A guard that holds costs no capture: lengths 6, 8, 10 share one graph."""
    torch.manual_seed(0)
    engine = _steps_match_eager(ParityBranch(), [(torch.randn(2, n, 4),) for n in (6, 8, 10)])
    assert sum(len(engines) for engines in engine._engines.values()) == 1


def test_an_unrolled_loop_serves_the_lengths_it_was_unrolled_for():
    torch.manual_seed(0)
    _steps_match_eager(ChunkLoop(), [(torch.randn(2, n, 4),) for n in (32, 64, 130, 40)])


def test_the_capture_records_the_guard_and_names_the_broken_one():
    captured = capture(ParityBranch(), (torch.randn(2, 6, 4),))
    assert len(captured.guards) == 1
    assert captured.accepts([(3, 8, 4)])
    why = captured.mismatch([(3, 9, 4)])
    assert "% 2) == 0" in why and "input 0 dim 1 = 9" in why


def test_guards_are_evaluated_as_size_arithmetic_only():
    assert failed_guard(["(s1 % 2) == 0", "max(s0, s1) <= 64"], {"s0": 3, "s1": 8}) is None
    assert failed_guard(["(s1 % 2) == 0"], {"s1": 9}) == "(s1 % 2) == 0"
    assert failed_guard(["math.ceil(s1 / 3) == 2"], {"s1": 9}) == "math.ceil(s1 / 3) == 2"
    assert failed_guard(["s1 == s2"], {"s1": 4}) == "s1 == s2"  # a symbol without a value decides nothing
    for text in ("__import__('os').system('true')", "s1.__class__", "open('f')", "[s1][0] == 1", "'a' == 'a'",
                 "math.sys", "(lambda: 1)()"):
        with pytest.raises(ValueError, match="not size arithmetic"):
            check_size_expression(text, {"max", "min"}, {"ceil"})
