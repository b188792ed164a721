"""Plain torch layers beyond the MLP / CNN / GPT blocks train through RTModule as in eager:
torch.gather (GatherElements and its gradient), torch.flip (Slice with step -1), nn.MultiheadAttention
and nn.TransformerEncoderLayer. Recurrent layers have their own tests (test_rnn.py); an LSTM with
projections (proj_size) stays out of scope: RTModule falls back to torch and the reason names the op."""

import pytest
import torch
from torch import nn

import trainrt
from parity import assert_parity, train_both


class GatherHead(nn.Module):
    """Picks per-row logits with torch.gather (a top-k style scorer), repeats included."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, idx):
        return torch.gather(self.proj(x).tanh(), 1, idx).pow(2).mean()


class FlipMix(nn.Module):
    """Adds a sequence to its time- and feature-reversed self (a bidirectional-style mix)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x).tanh()  # (B, T, 8)
        return (h * torch.arange(8.0) + torch.flip(h, [1, -1]) + h.flip(0)).pow(2).mean()


class AttentionLoss(nn.Module):
    """Mean squared error to a target of nn.MultiheadAttention's output (with a key padding mask)
    or an encoder layer's."""

    def __init__(self, layer: str):
        super().__init__()
        if layer == "mha":
            self.layer = nn.MultiheadAttention(16, 4, batch_first=True)
        else:
            self.layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.kind = layer

    def forward(self, x, pad, target):
        if self.kind == "mha":
            y = self.layer(x, x, x, key_padding_mask=pad)[0]
        else:
            y = self.layer(x, src_key_padding_mask=pad)
        return (y - target).pow(2).mean()


def gather_batches(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g), torch.randint(0, 8, (4, 5), generator=g)


def sequence_batches(step):  # one batch, repeated: it is learned
    g = torch.Generator().manual_seed(0)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[-1, 4:] = True
    return torch.randn(3, 6, 16, generator=g), pad, torch.randn(3, 6, 16, generator=g)


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def test_gather_trains_as_eager():
    eager, ours, losses = train_both(GatherHead, gather_batches, steps=10)
    assert_parity(eager, ours, losses)


def test_flip_trains_as_eager():
    def batches(step):
        return (torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(step)),)
    eager, ours, losses = train_both(FlipMix, batches, steps=10)
    assert_parity(eager, ours, losses)


@pytest.mark.parametrize("layer", ["mha", "encoder"])
def test_attention_layers_train_as_eager(layer):
    """Every parameter as eager's but the key third of in_proj_bias: its gradient is exactly zero
    (softmax ignores a shift along the keys), so AdamW moves it by steps of rounding noise that
    no two implementations share; the query and value thirds are compared."""
    eager, ours, losses = train_both(lambda: AttentionLoss(layer), sequence_batches, steps=10)
    losses_e, losses_o = zip(*losses)
    torch.testing.assert_close(torch.tensor(losses_o), torch.tensor(losses_e), rtol=1e-4, atol=0)
    assert losses_e[-1] < losses_e[0]
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        if name.endswith("in_proj_bias"):
            keep = torch.ones(pe.shape[0], dtype=torch.bool)
            keep[16:32] = False  # (q, k, v) thirds of embed_dim 16
            pe, po = pe[keep], po[keep]
        torch.testing.assert_close(po, pe, rtol=1e-3, atol=1e-5, msg=name)


class ProjectedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True, proj_size=4)

    def forward(self, x):
        return self.rnn(x)[0].pow(2).mean()


def test_lstm_with_projections_falls_back_naming_the_op_and_the_reason(monkeypatch):
    """The fallback runs the module in torch; the reason names the ATen op, its source line and why."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_UNSUPPORTED_ONNX_MODEL")
    torch.manual_seed(0)
    model = ProjectedLSTM()
    ours = trainrt.RTModule(model)
    x = torch.randn(2, 5, 8)
    loss = ours(x)
    assert "aten.lstm.input" in ours.fallback_reason and "proj_size > 0" in ours.fallback_reason
    assert "test_torch_layers.py" in ours.fallback_reason
    torch.testing.assert_close(loss, model(x))
    with monkeypatch.context() as m:
        m.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
        with pytest.raises(RuntimeError, match=r"aten\.lstm\.input"):
            trainrt.RTModule(ProjectedLSTM())(x)
