"""The gradient bytes a backward holds (trainrt/bench/tensor_memory.py, gradient_bytes_during) on a
model whose figures follow by hand: two bias-free Linear layers of 1024 x 256 f32 weights, 1 MiB of
gradient each (2 MiB in all), the input without grad."""

import pytest
import torch

import trainrt
from trainrt.bench.tensor_memory import gradient_bytes_during

_MIB = 1 << 20


@pytest.fixture(autouse=True)
def _engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _two_layers() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 256, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(256, 1024, bias=False))  # weights (256, 1024), (1024, 256)


# Each backward ends holding both gradients (nothing frees one before zero_grad): 2 MiB. Of them the
# engine holds, before torch has them: without the hand-over both, until its backward returns; with
# it one, since each weight's gradient is a group of its own (1 MiB = GROUP_BYTES) handed over as
# soon as it is final: the second layer's before the first's is computed (it needs dX of the second).
@pytest.mark.parametrize("mode, engine_peak", [("eager", 0), ("1", 1 * _MIB), ("0", 2 * _MIB)])
def test_gradients_held_by_torch_and_the_engine(monkeypatch, mode, engine_peak):
    monkeypatch.setenv("TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT", mode if mode != "eager" else "0")
    model = _two_layers() if mode == "eager" else trainrt.RTModule(_two_layers())
    x = torch.randn(8, 1024)
    for step in range(2):  # the second: the engine's arena and buffers are those of the first
        loss = model(x).square().mean()
        held = gradient_bytes_during(loss.backward, model.parameters(), getattr(model, "engines", []))
        assert held == {"peak_bytes": 2 * _MIB, "engine_peak_bytes": engine_peak}, (step, held)
        model.zero_grad(set_to_none=True)
    assert getattr(model, "fallback_reason", None) is None


def test_counting_starts_from_no_gradient():
    model = _two_layers()
    model(torch.randn(8, 1024)).sum().backward()
    with pytest.raises(ValueError, match="set_to_none"):
        gradient_bytes_during(model(torch.randn(8, 1024)).sum().backward, model.parameters())
