"""RTModule's fallback policy: what runs in PyTorch, when it is announced, when the engine is retried."""

import pytest
import torch
import torch.nn as nn

import trainrt
import trainrt.capture


class Odd(nn.Module):
    """bessel_j0 has no translation: capture fails with UnsupportedATenOp."""

    def forward(self, x):
        return torch.special.bessel_j0(x).sum()


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).sum()


@pytest.fixture
def capture_count(monkeypatch):
    """Counts calls of trainrt.capture.capture (RTModule imports it at build time)."""
    calls = []
    real = trainrt.capture.capture

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainrt.capture, "capture", counting)
    return calls


def test_failed_capture_is_remembered_and_announced_once(capture_count, trainrt_log):
    model = trainrt.RTModule(Odd())
    x = torch.randn(5)
    outs = [model(x) for _ in range(3)]
    assert len(capture_count) == 1
    assert trainrt_log.text.count("falling back to PyTorch") == 1
    for out in outs:
        torch.testing.assert_close(out, torch.special.bessel_j0(x).sum())


class TwoGaps(nn.Module):
    """bessel_j0 and cumprod have no translation; cumprod reads bessel_j0's output."""

    def forward(self, x):
        return torch.cumprod(torch.special.bessel_j0(x), 0).sum()


def test_fallback_reason_names_every_untranslated_op(trainrt_log):
    model = trainrt.RTModule(TwoGaps())
    x = torch.randn(5)
    torch.testing.assert_close(model(x), TwoGaps()(x))
    reason = model.fallback_reason
    assert reason.startswith("2 ATen ops of the graph cannot be translated (2 nodes):"), reason
    assert "aten.special_bessel_j0.default (node" in reason and "aten.cumprod.default (node" in reason
    assert "aten.cumprod.default" in trainrt_log.text


def test_retry_captures_again_on_every_call_after_a_fallback(capture_count, monkeypatch, trainrt_log):
    monkeypatch.setenv("ORTMODULE_FALLBACK_RETRY", "1")
    model = trainrt.RTModule(Odd())
    for _ in range(3):
        model(torch.randn(5))
    assert len(capture_count) == 3
    assert "will retry the engine on the next call" in trainrt_log.text


def test_unsupported_data_falls_back_for_that_call_only(trainrt_log):
    torch.manual_seed(0)
    plain = Affine()
    model = trainrt.RTModule(plain)
    complex_input = torch.randn(2, 4, dtype=torch.complex64)
    with pytest.raises(RuntimeError):  # torch's own Linear refuses complex input with f32 weights
        model(complex_input)
    assert "FALLBACK_UNSUPPORTED_DATA" in trainrt_log.text and "complex64" in trainrt_log.text
    x = torch.randn(2, 4)
    torch.testing.assert_close(model(x), plain(x))
    assert len(model._engines) == 1 and model.fallback_reason is None  # the f32 call ran in the engine


def test_unsupported_data_with_fallback_disabled_names_the_dtype(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="complex64"):
        trainrt.RTModule(Affine())(torch.randn(2, 4, dtype=torch.complex64))


def test_force_torch_forward_never_builds_an_engine(capture_count, monkeypatch, trainrt_log):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_FORCE_TORCH_FORWARD")
    torch.manual_seed(0)
    plain = Affine()
    model = trainrt.RTModule(plain)
    x = torch.randn(2, 4)
    torch.testing.assert_close(model(x), plain(x))
    model(x)
    assert not capture_count and not model._engines
    assert trainrt_log.text.count("FALLBACK_FORCE_TORCH_FORWARD") == 1


def test_onnx_opset_version_other_than_the_captured_one_is_refused(monkeypatch):
    monkeypatch.setenv("ORTMODULE_ONNX_OPSET_VERSION", "17")
    with pytest.raises(ValueError, match="opset 20"):
        trainrt.RTModule(Affine())
    monkeypatch.setenv("ORTMODULE_ONNX_OPSET_VERSION", "20")
    trainrt.RTModule(Affine())

