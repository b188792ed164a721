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


def test_resnet_saves_less_than_the_plain_partition_and_results_stay_the_same(monkeypatch):
    """The saved-set choices on the ResNet (plan/saved_values.h): each block's first BN + ReLU is
    recomputed in the backward (rule 4: three BatchNormalization nodes there), and the stem's MaxPool
    gradient reads the pooled output and a u8 argmax instead of the ReLU output (rule 5). The forward
    saves one (B, w, H, W) less per block and 3/4 of the stem's ReLU output less; the results match the
    programs without the choices (compute optimizer off, which also turns off the other rewrites;
    plan_test checks rules 4 and 5 alone bit for bit)."""
    import copy

    import onnx

    torch.manual_seed(0)
    plain = ResNetCNN(widths=(8, 16, 32))
    images, labels = image_batches(6)(0)
    saved, ops, results = {}, {}, {}
    for flag in ("1", "0"):
        monkeypatch.setenv("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", flag)
        model = trainrt.RTModule(copy.deepcopy(plain))
        loss = model(images, labels)
        loss.backward()
        assert model._fallback_reason is None
        programs = model.engines[0].programs
        saved[flag] = programs.memory_stats()["forward"]["saved_bytes"]
        backward = onnx.load_from_string(programs.backward_graph_onnx())
        ops[flag] = [n.op_type for n in backward.graph.node]
        results[flag] = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[flag].update({n: b.clone() for n, b in model.named_buffers()})
        results[flag]["loss"] = loss.detach()
    assert ops["1"].count("BatchNormalization") == 3 and ops["0"].count("BatchNormalization") == 0
    assert ops["1"].count("MaxPoolArgmaxGrad") == 1 and "MaxPoolGrad" not in ops["1"]
    # f32 bytes: the blocks' first ReLU outputs (6, w, H, W) on 16x16 images (8x8 after the stem's
    # pool), and the stem's ReLU output (6, 8, 16, 16) less the argmax (6, 8, 8, 8) u8 kept instead.
    relu_bytes = 4 * 6 * (8 * 8 * 8 + 16 * 4 * 4 + 32 * 2 * 2)
    stem_bytes = 4 * 6 * 8 * 16 * 16 - 6 * 8 * 8 * 8
    # Rule 7 makes the classifier's gradients in the forward (its log_prob and input no longer
    # saved): its weight and bias gradients, which the backward made first anyway, count as saved.
    head_grad_bytes = 4 * (10 * 32 + 10)
    assert saved["0"] - saved["1"] + head_grad_bytes >= relu_bytes + stem_bytes
    for name, value in results["0"].items():
        torch.testing.assert_close(results["1"][name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_resnet_under_bf16_autocast_saves_the_bf16_conv_outputs_not_their_f32_casts(monkeypatch):
    """Under bf16 autocast each BatchNorm reads the f32 Cast of a bf16 Conv output; the saved-set choice
    saves the bf16 output and casts again in the backward (plan/saved_values.h, rule 3's widening Cast):
    at least half of the f32 BN inputs' bytes are not saved, and the results match the programs without
    the choices."""
    import copy

    torch.manual_seed(0)
    plain = ResNetCNN(widths=(8, 16, 32))
    images, labels = image_batches(6)(0)
    saved, results = {}, {}
    for flag in ("1", "0"):
        monkeypatch.setenv("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", flag)
        model = trainrt.RTModule(copy.deepcopy(plain), mixed_precision="bf16")
        loss = model(images, labels)
        loss.backward()
        assert model._fallback_reason is None
        saved[flag] = model.engines[0].programs.memory_stats()["forward"]["saved_bytes"]
        results[flag] = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[flag]["loss"] = loss.detach()
    # The nine BN inputs (6, w, H, W): the stem's 8 x 16 x 16, then 8 x 8 x 8 (two), and per later
    # block three of 16 x 4 x 4 and three of 32 x 2 x 2; 2 of their 4 bytes each.
    bn_values = 6 * (8 * 16 * 16 + 2 * 8 * 8 * 8 + 3 * 16 * 4 * 4 + 3 * 32 * 2 * 2)
    assert saved["0"] - saved["1"] >= 2 * bn_values
    for name, value in results["0"].items():
        torch.testing.assert_close(results["1"][name], value, rtol=1e-5, atol=1e-6, msg=name)
