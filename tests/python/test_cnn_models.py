"""The ResNet-style CNN (Conv with stride, padding, groups and dilation, BatchNormalization with running
statistics, MaxPool, residual Add, ReLU, GlobalAveragePool, Flatten, Linear) trains through RTModule
as it does in PyTorch eager."""

import pytest
import torch

import trainrt
from parity import assert_parity, train_both
from trainrt.bench.cnn import ResNetCNN


def image_batches(batch: int, size: int = 16):
    def batches(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g)

    return batches


@pytest.mark.parametrize("variant", [dict(), pytest.param(dict(groups=4, dilation=2), marks=pytest.mark.slow)],
                         ids=["plain", "grouped-dilated"])
def test_resnet_matches_eager_for_20_adamw_steps(variant):
    eager, ours, losses = train_both(lambda: ResNetCNN(widths=(8, 16, 32), **variant), image_batches(6))
    assert_parity(eager, ours, losses)  # includes the BatchNorm running statistics written back


def test_resnet_eval_mode_uses_running_statistics_and_batch_size_can_change():
    eager, ours, _ = train_both(lambda: ResNetCNN(widths=(8, 16, 32)), image_batches(6), steps=3)
    eager.eval()
    model = trainrt.RTModule(ours.eval())
    for batch in (1, 5):
        images, labels = image_batches(batch)(100 + batch)
        with torch.no_grad():
            torch.testing.assert_close(model(images, labels), eager(images, labels), rtol=1e-5, atol=1e-6)
    assert model._fallback_reason is None
