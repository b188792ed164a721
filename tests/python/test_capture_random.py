"""Random draws in a module (capture/ops_random.py): torch.rand / randn / bernoulli / exponential_ run
as the engine's random ops, reproducible under torch.manual_seed, with eager's distributions, and
differentiated as drawn (the backward reads the forward's draw). Stochastic depth (DropPath), which
used to send ConvNeXt, Swin and friends with drop_path_rate > 0 back to PyTorch, trains in the
engine. Fallback is disabled: every result here is the engine's."""

import copy

import pytest
import torch
from torch import nn

import trainrt


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Draws(nn.Module):
    def forward(self, x):  # x (B, N): only its shape is used
        e = torch.empty_like(x).exponential_(2.0)
        return torch.rand(x.shape), torch.randn_like(x) * 3 + 1, torch.bernoulli(torch.full_like(x, 0.3)), e


def test_draws_have_eagers_distributions_and_follow_torch_manual_seed():
    rt = trainrt.RTModule(Draws())
    x = torch.zeros(64, 1000)
    torch.manual_seed(0)
    u, n, b, e = rt(x)
    assert rt._fallback_reason is None
    assert u.shape == x.shape and 0 <= u.min() and u.max() < 1
    assert u.mean().item() == pytest.approx(0.5, abs=0.01)
    assert n.mean().item() == pytest.approx(1.0, abs=0.03) and n.std().item() == pytest.approx(3.0, abs=0.03)
    assert set(b.unique().tolist()) == {0.0, 1.0} and b.mean().item() == pytest.approx(0.3, abs=0.01)
    assert e.min() >= 0 and e.mean().item() == pytest.approx(0.5, abs=0.01)  # 1 / lambd
    torch.manual_seed(0)
    again = rt(x)
    assert all(torch.equal(a, b) for a, b in zip(again, (u, n, b, e)))  # the same seed, the same draws
    assert not torch.equal(rt(x)[0], u)  # the next call draws anew


class DropPathNet(nn.Module):
    """Stochastic depth in Hugging Face's form (floor(keep + rand)) and timm's (bernoulli_)."""

    def __init__(self, keep: float = 0.6):
        super().__init__()
        self.keep = keep
        self.proj = nn.Linear(8, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x):  # x (B, 8)
        h = self.proj(x)
        if self.training:
            mask = torch.floor(self.keep + torch.rand(x.shape[0], 1, dtype=x.dtype))
            h = h / self.keep * mask
            timm_mask = x.new_empty(x.shape[0], 1).bernoulli_(self.keep)
            h = h + self.proj(x) / self.keep * timm_mask
        return self.out(h)  # (B, 1)


def test_drop_path_is_differentiated_as_drawn_and_eval_is_eager():
    torch.manual_seed(0)
    eager = DropPathNet()
    rt = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(256, 8, requires_grad=True)
    y = rt(x)
    y.sum().backward()
    assert rt._fallback_reason is None
    # Each row kept 0, 1 or 2 of its two dropped paths: y - bias = (out . proj(x) / keep) * kept.
    with torch.no_grad():
        one_path = (rt.proj(x) @ rt.out.weight.T / rt.keep).squeeze(1)
        kept = ((y.squeeze(1) - rt.out.bias) / one_path).round()
    assert set(kept.unique().tolist()) <= {0.0, 1.0, 2.0}
    assert kept.mean().item() == pytest.approx(2 * 0.6, abs=0.2)
    # The backward differentiates those same draws (none drawn again): x.grad = kept * out.W @ proj.W / keep.
    unit = (rt.out.weight @ rt.proj.weight / rt.keep).squeeze(0)
    torch.testing.assert_close(x.grad, kept[:, None] * unit, rtol=1e-4, atol=1e-6)
    rt.eval()
    eager.eval()
    x = torch.randn(4, 8)
    torch.testing.assert_close(rt(x), eager(x))


def test_convnext_with_drop_path_trains_in_the_engine():
    transformers = pytest.importorskip("transformers")
    config = transformers.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1],
                                         num_labels=3, image_size=32, drop_path_rate=0.3)
    torch.manual_seed(0)
    eager = transformers.ConvNextForImageClassification(config)
    rt = trainrt.RTModule(copy.deepcopy(eager))
    optimizer = torch.optim.SGD(rt.parameters(), lr=0.01, momentum=0.9)
    x, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 1])
    for _ in range(3):
        loss = rt(pixel_values=x, labels=labels).loss
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert rt._fallback_reason is None
    rt.eval()
    eager.load_state_dict(rt.state_dict())
    eager.eval()
    torch.testing.assert_close(rt(pixel_values=x).logits, eager(pixel_values=x).logits, rtol=1e-5, atol=1e-5)


def test_a_draw_from_a_generator_of_its_own_is_refused():
    class OwnGenerator(nn.Module):
        def forward(self, x):
            return x + torch.rand(x.shape, generator=torch.Generator().manual_seed(1))

    with pytest.raises(RuntimeError, match="Generator"):
        trainrt.RTModule(OwnGenerator())(torch.zeros(2, 3))


@pytest.mark.parametrize("dropout, per_channel", [(nn.Dropout2d(0.4), True), (nn.Dropout1d(0.4), True),
                                                  (nn.Dropout3d(0.4), True), (nn.AlphaDropout(0.4), False),
                                                  (nn.FeatureAlphaDropout(0.4), True)])
def test_dropouts_that_are_not_onnx_dropout(dropout, per_channel):
    """Per-channel and alpha dropout as torch defines them, read back from the output: a dropped
    element is 0 (alpha: alpha * a * (p - 1)), a kept one x / (1 - p) (alpha: x * a + alpha * a * p);
    whole (batch, channel) planes together where per channel; about p of them dropped; the input's
    gradient is the kept elements' factor."""
    rank = {nn.Dropout1d: 3, nn.Dropout3d: 5}.get(type(dropout), 4)
    x = torch.randn(*(16, 32, 6, 5, 4)[:rank], requires_grad=True)
    rt = trainrt.RTModule(nn.Sequential(dropout))
    y = rt(x)
    y.sum().backward()
    assert rt._fallback_reason is None
    p, alpha = 0.4, 1.7580993408473766
    if isinstance(dropout, (nn.AlphaDropout, nn.FeatureAlphaDropout)):
        a = 1 / ((alpha * alpha * p + 1) * (1 - p)) ** 0.5
        kept_value, dropped_value, factor = x * a + alpha * a * p, torch.full_like(x, alpha * a * (p - 1)), a
    else:
        kept_value, dropped_value, factor = x / (1 - p), torch.zeros_like(x), 1 / (1 - p)
    kept = torch.isclose(y, kept_value, rtol=1e-5, atol=1e-6)
    dropped = torch.isclose(y, dropped_value, rtol=1e-5, atol=1e-6) & ~kept
    assert bool((kept | dropped).all())
    if per_channel:  # one decision per (batch, channel)
        planes = kept.flatten(2).float().mean(-1)
        assert bool(((planes == 0) | (planes == 1)).all())
    assert (~kept).float().mean().item() == pytest.approx(p, abs=0.08)
    torch.testing.assert_close(x.grad, kept.float() * factor)
    rt.eval()
    torch.testing.assert_close(rt(x), x)
