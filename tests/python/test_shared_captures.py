"""A second RTModule of a module built like one captured before reuses its capture (no torch.export),
binds its own weights and gets its own gradients; a module that differs in what its forward reads
(a plain attribute, a hook) is captured again."""

import copy

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt import shared_captures


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    monkeypatch.delenv("TRAINRT_CACHE_DIR", raising=False)
    monkeypatch.setattr(shared_captures, "_captures", {})


@pytest.fixture
def exports(monkeypatch):
    """How many times torch.export ran."""
    calls = []
    real = torch.export.export
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


class Scaled(nn.Module):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.scale = scale  # read by forward, seen in no parameter's shape

    def forward(self, x):  # x: (B, 6) -> (B, 3)
        return self.fc2(torch.tanh(self.fc1(x)) * self.scale)


def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    out = model(x)
    out.square().sum().backward()
    return out


def test_a_second_module_of_the_same_structure_reuses_the_capture_with_its_own_weights(exports):
    torch.manual_seed(0)
    first, second = Scaled(), Scaled()  # different weights
    eager_first, eager_second = copy.deepcopy(first), copy.deepcopy(second)
    rt_first, rt_second = trainrt.RTModule(first), trainrt.RTModule(second)
    x = torch.randn(5, 6)
    for rt, eager in ((rt_first, eager_first), (rt_second, eager_second), (rt_first, eager_first)):
        torch.testing.assert_close(step(rt, x), step(eager, x))
        for p, q in zip(rt.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
        assert rt.fallback_reason is None
    assert len(exports) == 1
    assert rt_second.engines[0].captured is rt_first.engines[0].captured
    assert rt_second.engines[0].programs is not rt_first.engines[0].programs  # each its own engine


def test_another_batch_size_reuses_the_symbolic_capture(exports):
    torch.manual_seed(0)
    trainrt.RTModule(Scaled())(torch.randn(5, 6))
    model, x = Scaled(), torch.randn(9, 6)
    torch.testing.assert_close(trainrt.RTModule(copy.deepcopy(model))(x), model(x))
    assert len(exports) == 1


def test_a_module_that_differs_in_what_forward_reads_is_captured_again(exports):
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    trainrt.RTModule(Scaled(2.0))(x)
    other = Scaled(3.0)
    torch.testing.assert_close(trainrt.RTModule(copy.deepcopy(other))(x), other(x))
    assert len(exports) == 2
    trainrt.RTModule(Scaled(2.0)).eval()(x)  # eval mode: another graph
    assert len(exports) == 3


def test_a_module_with_hooks_is_not_shared(exports):
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    trainrt.RTModule(Scaled())(x)
    hooked = Scaled()
    hooked.fc1.register_forward_hook(lambda m, i, o: o * 10)
    torch.testing.assert_close(trainrt.RTModule(copy.deepcopy(hooked))(x), hooked(x))
    assert len(exports) == 2


def test_tied_weights_are_structure():
    class Tied(nn.Module):
        def __init__(self, tie: bool):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
            if tie:
                self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    assert shared_captures.key_of(Tied(True), "k") != shared_captures.key_of(Tied(False), "k")
    assert shared_captures.key_of(Tied(True), "k") == shared_captures.key_of(Tied(True), "k")


def test_attributes_the_key_cannot_describe_keep_a_module_unshared():
    model = Scaled()
    model.helper = object()
    assert shared_captures.key_of(model, "k") is None
    model.helper = lambda x: x
    assert shared_captures.key_of(model, "k") is None
    model.helper = torch.tensor([1.0, 2.0])  # a plain tensor attribute: a lifted constant, keyed by its bytes
    key = shared_captures.key_of(model, "k")
    model.helper = torch.tensor([1.0, 3.0])
    assert key is not None and shared_captures.key_of(model, "k") != key


def test_a_shared_capture_is_written_to_the_export_cache_for_the_next_process(exports, monkeypatch, tmp_path):
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    trainrt.RTModule(Scaled())(x)  # no cache dir: shared in this process only
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path))
    model = Scaled()
    torch.testing.assert_close(trainrt.RTModule(copy.deepcopy(model))(x), model(x))
    assert len(exports) == 1 and len(list(tmp_path.glob("*.trainrt-capture"))) == 1
