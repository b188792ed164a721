"""nn.Conv1d/2d/3d through trainrt.RTModule against torch: outputs, input/weight/bias gradients and
a few AdamW steps; the conv forms TrainRT does not translate fail naming the reason."""

import copy

import pytest
import torch
import torch.nn as nn

import trainrt
from test_rtmodule import assert_parity, train_both

# (name, module factory, input shape)
CONVS = [
    ("2d 3x3 pad 1", lambda: nn.Conv2d(3, 8, 3, padding=1), (4, 3, 10, 10)),
    ("2d stride 2 odd sizes", lambda: nn.Conv2d(3, 5, (3, 2), stride=2, padding=(1, 0)), (3, 3, 9, 11)),
    ("2d dilation 2", lambda: nn.Conv2d(4, 6, 3, dilation=2, padding=2), (2, 4, 9, 8)),
    ("2d groups 2 no bias", lambda: nn.Conv2d(4, 6, 3, groups=2, bias=False), (2, 4, 7, 7)),
    ("2d depthwise", lambda: nn.Conv2d(6, 12, 3, groups=6, padding=1), (3, 6, 8, 8)),
    ("2d padding same, even kernel", lambda: nn.Conv2d(3, 4, 4, padding="same", dilation=1), (2, 3, 9, 7)),
    ("2d padding valid", lambda: nn.Conv2d(3, 4, 3, padding="valid"), (2, 3, 6, 6)),
    ("1d", lambda: nn.Conv1d(3, 6, 5, stride=2, padding=2), (4, 3, 17)),
    ("1d padding same, dilation 2", lambda: nn.Conv1d(2, 4, 3, padding="same", dilation=2), (3, 2, 12)),
    ("3d", lambda: nn.Conv3d(2, 3, (3, 2, 3), stride=(1, 2, 1), padding=1), (2, 2, 5, 6, 4)),
    ("2d unbatched", lambda: nn.Conv2d(3, 4, 3), (3, 6, 6)),
    # padding_mode other than zeros: F.pad in that mode (ONNX Pad reflect / edge / wrap), then the conv
    ("2d padding_mode reflect", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), (2, 3, 6, 6)),
    ("2d padding_mode circular", lambda: nn.Conv2d(3, 4, 3, padding=(2, 1), padding_mode="circular"), (2, 3, 7, 6)),
    ("1d padding_mode replicate", lambda: nn.Conv1d(2, 3, 5, padding=2, padding_mode="replicate"), (3, 2, 9)),
]


@pytest.mark.parametrize("make, shape", [c[1:] for c in CONVS], ids=[c[0] for c in CONVS])
def test_conv_output_and_gradients_match_torch(make, shape):
    torch.manual_seed(0)
    eager = make()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(shape)
    xe, xo = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yo = eager(xe), ours(xo)
    assert ours._fallback_reason is None, ours._fallback_reason
    torch.testing.assert_close(yo, ye, rtol=1e-4, atol=1e-5)
    dy = torch.randn_like(ye)
    ye.backward(dy)
    yo.backward(dy)
    torch.testing.assert_close(xo.grad, xe.grad, rtol=1e-4, atol=1e-5)
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-4, atol=1e-4, msg=name)


class SmallCNN(nn.Module):
    """Conv -> ReLU -> grouped strided conv -> depthwise conv (no bias) -> GELU -> pool by mean -> Linear -> CE."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.c3 = nn.Conv2d(16, 16, 3, padding="same", groups=16, bias=False)
        self.fc = nn.Linear(16, 5)

    def forward(self, x, y):
        h = nn.functional.gelu(self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))))
        return nn.functional.cross_entropy(self.fc(h.mean(dim=(2, 3))), y)


def test_small_cnn_matches_eager_for_5_adamw_steps():
    def batches(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(6, 3, 12, 12, generator=g), torch.randint(0, 5, (6,), generator=g)

    assert_parity(*train_both(SmallCNN, batches, steps=5))


@pytest.mark.parametrize("module, reason", [
    (nn.ConvTranspose2d(3, 4, 3), "transposed convolution"),
], ids=["transposed"])
def test_unsupported_conv_forms_raise_naming_the_reason(monkeypatch, module, reason):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match=reason):
        trainrt.RTModule(module)(torch.randn(2, 3, 6, 6))
