"""Models whose parameters are bf16 or f16 (model.bfloat16(), from_pretrained(torch_dtype=...)) train
in the engine as eager trains them: each op computes in that dtype as torch's CPU kernels do (f32
inside, one rounding per output), and ops the engine has in f32 only run between casts
(autodiff/low_precision.h). Same model, seed and batches through eager and RTModule, fallback
disabled, SGD with momentum, 3 steps: losses within a few roundings of the dtype, each gradient
within a few percent of its largest entry (a bf16 ulp is 0.4%; sums of many rounded terms add up),
gradients in the parameters' dtype, None where eager's are None."""

import copy

import pytest
import torch
from test_ddp import TiedLM

import trainrt

# Per dtype: (loss rtol, gradient error as a fraction of the gradient's largest entry).
TOLERANCE = {torch.bfloat16: (2e-2, 5e-2), torch.float16: (3e-3, 1e-2)}


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class SmallCNN(torch.nn.Module):
    """Conv -> BatchNorm (f32-only in the engine: widened) -> ReLU -> MaxPool -> Linear -> loss."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)  # a bias before BatchNorm has no gradient
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x, y):
        h = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv(x))), 2)
        return torch.nn.functional.cross_entropy(self.head(h.flatten(1)), y)


class PadCumsum(torch.nn.Module):
    """Reflect padding and a running sum, whose kernels (PadGrad, CumSum) take f32 / f64 only: widened."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 12)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x, y):
        h = torch.nn.functional.pad(self.proj(x).unsqueeze(1), (2, 2), mode="reflect").squeeze(1)
        return torch.nn.functional.cross_entropy(self.head(torch.cumsum(h, -1) / 16), y)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=32,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _bert():
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _batch(kind, step, dtype):
    g = torch.Generator().manual_seed(step)
    if kind == "cnn":
        return {"x": torch.randn(4, 3, 16, 16, generator=g).to(dtype), "y": torch.randint(0, 10, (4,), generator=g)}
    if kind == "padcum":
        return {"x": torch.randn(4, 8, generator=g).to(dtype), "y": torch.randint(0, 10, (4,), generator=g)}
    if kind == "tied":
        return {"ids": torch.randint(0, 64, (4, 8), generator=g), "labels": torch.randint(0, 64, (4, 8), generator=g)}
    ids = torch.randint(0, 128, (2, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # padding
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _loss(model, batch):
    out = model(**batch)
    return out if isinstance(out, torch.Tensor) else out.loss


MODELS = {"tied": TiedLM, "cnn": SmallCNN, "padcum": PadCumsum, "gpt2": _gpt2, "bert": _bert}
# Parameters whose true gradient is exactly zero (a key bias: softmax does not see a shift of all
# scores): both sides hold rounding noise there, which says nothing.
ZERO_GRADIENT = ("attention.self.key.bias",)


@pytest.mark.parametrize("kind, dtype", [("tied", torch.bfloat16), ("tied", torch.float16), ("cnn", torch.bfloat16),
                                         ("cnn", torch.float16), ("padcum", torch.bfloat16), ("padcum", torch.float16),
                                         ("gpt2", torch.bfloat16), ("bert", torch.bfloat16)])
def test_low_precision_parameters_train_as_eager(kind, dtype):
    loss_rtol, grad_tol = TOLERANCE[dtype]
    torch.manual_seed(0)
    eager = MODELS[kind]().to(dtype)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9) for m in (eager, ours)]
    for step in range(3):
        batch = _batch(kind, step, dtype)
        expected, got = _loss(eager, batch), _loss(ours, batch)
        assert ours.fallback_reason is None
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.float(), expected.float(), rtol=loss_rtol, atol=0)
        expected.backward()
        got.backward()
        for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
            if q.grad is None:
                assert p.grad is None, name
                continue
            assert p.grad.dtype == dtype, name
            if name.endswith(ZERO_GRADIENT):
                continue
            error = (p.grad.float() - q.grad.float()).abs().max() / q.grad.float().abs().max().clamp_min(1e-6)
            assert error <= grad_tol, f"step {step}, {name}: gradient off by {error:.3g} of its largest entry"
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    for (name, b), e in zip(ours.named_buffers(), eager.buffers()):  # BatchNorm's running statistics
        assert b.dtype == e.dtype, name
        torch.testing.assert_close(b.float(), e.float(), rtol=loss_rtol, atol=grad_tol * e.float().abs().max(), msg=name)


def test_low_precision_evaluation_runs_in_the_engine_as_eager():
    torch.manual_seed(0)
    eager = SmallCNN().bfloat16().eval()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    batch = _batch("cnn", 0, torch.bfloat16)
    with torch.no_grad():
        expected, got = eager(**batch), ours(**batch)
    assert ours.fallback_reason is None
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=0)
