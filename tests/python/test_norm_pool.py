"""BatchNorm and pooling through trainrt.RTModule against PyTorch eager: outputs, input and parameter
gradients, running statistics written back, eval mode, clear refusals, and 20 AdamW steps of two
small models (an MLP with BatchNorm1d and a pooling CNN with BatchNorm2d)."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trainrt
from trainrt.capture import CaptureError, UnsupportedATenOp, capture


def run_both(model: nn.Module, x: torch.Tensor, seed: int = 0):
    """(eager, ours) pairs of (output, input grad, param grads) for loss = sum(out * w)."""
    ours_model = trainrt.RTModule(copy.deepcopy(model))
    results = []
    for m in (model, ours_model):
        xi = x.clone().requires_grad_(True)
        out = m(xi)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
        (out * w).sum().backward()
        results.append((out.detach(), xi.grad, {n: p.grad for n, p in m.named_parameters()}))
    assert ours_model._fallback_reason is None, ours_model._fallback_reason
    return results, ours_model


def assert_same(eager, ours, rtol=1e-4, atol=1e-5):
    torch.testing.assert_close(ours[0], eager[0], rtol=rtol, atol=atol, msg="output")
    torch.testing.assert_close(ours[1], eager[1], rtol=rtol, atol=atol, msg="input gradient")
    assert ours[2].keys() == eager[2].keys()
    for name in eager[2]:
        torch.testing.assert_close(ours[2][name], eager[2][name], rtol=rtol, atol=atol, msg=name)


BATCH_NORMS = [
    (lambda: nn.BatchNorm1d(6), (8, 6)),
    (lambda: nn.BatchNorm1d(4, momentum=0.3), (5, 4, 7)),
    (lambda: nn.BatchNorm2d(3), (4, 3, 5, 6)),
    (lambda: nn.BatchNorm2d(3, affine=False), (2, 3, 4, 4)),
    (lambda: nn.BatchNorm3d(2), (2, 2, 3, 4, 3)),
]


@pytest.mark.parametrize("make, shape", BATCH_NORMS)
def test_batch_norm_training_matches_torch_and_writes_back_running_stats(make, shape):
    torch.manual_seed(0)
    eager = make().train()
    with torch.no_grad():
        if eager.affine:
            eager.weight.uniform_(0.5, 2), eager.bias.uniform_(-1, 1)
        eager.running_var.uniform_(0.5, 2)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    for step in range(3):  # the running stats must carry over from step to step
        x = torch.randn(shape) * 2 + 1
        xe, xo = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        w = torch.randn(shape)
        ye, yo = eager(xe), ours(xo)
        (ye * w).sum().backward()
        (yo * w).sum().backward()
        torch.testing.assert_close(yo, ye, rtol=1e-4, atol=1e-5, msg=f"step {step} output")
        torch.testing.assert_close(xo.grad, xe.grad, rtol=1e-4, atol=1e-5, msg=f"step {step} input gradient")
    for name, pe in eager.named_parameters():
        torch.testing.assert_close(ours.get_parameter(name).grad, pe.grad, rtol=1e-4, atol=1e-5, msg=name)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(ours._module.get_buffer(name), eager.get_buffer(name), rtol=1e-5, atol=1e-6,
                                   msg=name)
    assert ours._fallback_reason is None


@pytest.mark.parametrize("make, shape", BATCH_NORMS)
def test_batch_norm_eval_uses_the_running_stats(make, shape):
    torch.manual_seed(1)
    model = make()
    with torch.no_grad():
        model.running_mean.uniform_(-1, 1), model.running_var.uniform_(0.5, 2)
    model.eval()
    (eager, ours), wrapped = run_both(model, torch.randn(shape))
    assert_same(eager, ours)
    assert int(wrapped._module.num_batches_tracked) == 0  # eval mode changes no buffer


def test_batch_norm_without_running_stats_normalizes_with_the_batch():
    torch.manual_seed(2)
    (eager, ours), _ = run_both(nn.BatchNorm2d(3, track_running_stats=False), torch.randn(2, 3, 4, 5))
    assert_same(eager, ours)


POOLS = [
    (nn.MaxPool1d(3, 2, 1), (2, 3, 9)),
    (nn.MaxPool2d(3, 2, 1), (2, 3, 9, 8)),
    (nn.MaxPool2d((2, 3), (2, 1), (1, 1), dilation=(1, 2), ceil_mode=True), (2, 2, 7, 9)),
    (nn.MaxPool3d(2), (1, 2, 4, 6, 4)),
    (nn.AvgPool1d(3, 2, 1), (2, 3, 9)),
    (nn.AvgPool2d(3, 2, 1), (2, 3, 9, 8)),
    (nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 8, 8)),
    (nn.AvgPool2d(3, 3, 1, ceil_mode=True, count_include_pad=True), (1, 2, 8, 7)),
    (nn.AvgPool3d(2, 1), (1, 2, 3, 4, 3)),
    # A window longer than the input in ceil mode: one output pooling what it covers (EfficientNet's
    # pooler, AvgPool2d(hidden_dim, ceil_mode=True) on a 2 x 2 map).
    (nn.AvgPool2d(16, ceil_mode=True), (2, 3, 5, 6)),
    (nn.AvgPool2d(16, ceil_mode=True, count_include_pad=False), (2, 3, 5, 6)),
    (nn.MaxPool2d(8, ceil_mode=True), (2, 3, 5, 6)),
    (nn.AdaptiveAvgPool2d(1), (2, 3, 5, 7)),
    (nn.AdaptiveAvgPool2d((2, 3)), (2, 3, 4, 6)),
    (nn.AdaptiveAvgPool1d(1), (2, 3, 5)),
    (nn.AdaptiveMaxPool2d(1), (2, 3, 5, 7)),
    (nn.AdaptiveMaxPool2d((2, 2)), (2, 3, 4, 6)),
    (nn.MaxPool2d(2), (3, 6, 4)),  # unbatched (C, H, W)
]


@pytest.mark.parametrize("module, shape", POOLS, ids=lambda v: repr(v) if isinstance(v, nn.Module) else str(v))
def test_pooling_matches_torch(module, shape):
    torch.manual_seed(3)
    (eager, ours), _ = run_both(module, torch.randn(shape))
    assert_same(eager, ours, rtol=1e-5, atol=1e-6)


def test_max_pool_ties_route_the_gradient_like_torch():
    x = torch.tensor([[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]])  # every window is a tie
    (eager, ours), _ = run_both(nn.MaxPool2d(2), x)
    assert_same(eager, ours, rtol=0, atol=0)


@pytest.mark.parametrize("module, shape, message", [
    (nn.AvgPool2d(2, divisor_override=3), (1, 2, 4, 4), "divisor_override"),
    (nn.AdaptiveAvgPool2d(3), (1, 2, 8, 8), "does not divide"),
])
def test_pooling_forms_without_an_equivalent_are_refused_by_name(module, shape, message):
    with pytest.raises(UnsupportedATenOp, match=message):
        capture(module, (torch.randn(shape),), {})


@pytest.mark.parametrize("make, shapes", [
    (lambda: nn.BatchNorm1d(6, momentum=None), [(8, 6), (5, 6), (8, 6)]),
    (lambda: nn.BatchNorm1d(4, momentum=None, affine=False), [(5, 4, 7), (3, 4, 9)]),
    (lambda: nn.Sequential(nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5, momentum=None), nn.ReLU()), [(4, 3, 8, 8), (2, 3, 8, 8)]),
    (lambda: nn.BatchNorm3d(2, momentum=None), [(2, 2, 3, 4, 5)]),
], ids=["1d", "1d-seq-no-affine", "conv-2d", "3d"])
def test_cumulative_batch_norm_trains_in_the_engine_as_eager(make, shapes):
    """momentum=None: the running stats are the average over every batch seen (factor 1 / count, in
    the graph). Over SGD-momentum steps at several batch sizes: outputs, gradients, running stats and
    the batch count as eager; then eval mode reads the same running stats."""
    torch.manual_seed(0)
    eager = make()
    ours_inner = copy.deepcopy(eager)
    ours = trainrt.RTModule(ours_inner)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) if list(m.parameters()) else None
            for m in (eager, ours)]
    for step, shape in enumerate(shapes * 2):
        x = torch.randn(shape) * 3 + 1
        results = []
        for m, opt in zip((eager, ours), opts):
            xi = x.clone().requires_grad_(True)
            out = m(xi)
            (out * out.detach().sign()).sum().backward()
            results.append((out.detach(), xi.grad, {n: p.grad.clone() for n, p in m.named_parameters()}))
            if opt:
                opt.step()
                opt.zero_grad()
        assert_same(*results)
        for (name, be), (_, bo) in zip(eager.named_buffers(), ours_inner.named_buffers()):
            torch.testing.assert_close(bo, be, rtol=1e-4, atol=1e-5, msg=f"step {step} {name}")
    assert ours._fallback_reason is None, ours._fallback_reason
    eager.eval(), ours.eval()
    x = torch.randn(shapes[0])
    torch.testing.assert_close(ours(x), eager(x), rtol=1e-5, atol=1e-5)


def test_a_batch_norm_subclass_with_its_own_forward_and_momentum_none_is_refused_clearly():
    class OwnForward(nn.BatchNorm1d):
        def forward(self, x):
            return super().forward(x) * 2

    with pytest.raises(CaptureError, match="'0' is a BatchNorm subclass with its own forward and momentum=None"):
        capture(nn.Sequential(OwnForward(3, momentum=None)), (torch.randn(4, 3),), {})


def train_both(make, batches, steps=20, lr=1e-3):
    torch.manual_seed(0)
    eager = make()
    ours_inner = copy.deepcopy(eager)
    ours = trainrt.RTModule(ours_inner)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=lr)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=lr)
    for step in range(steps):
        x, y = batches(step)
        losses = []
        for model, opt in ((eager, opt_e), (ours, opt_o)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-4), f"step {step}: {losses[1]} vs {losses[0]}"
    assert ours._fallback_reason is None, ours._fallback_reason
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours_inner.named_parameters()):
        torch.testing.assert_close(po, pe, rtol=1e-3, atol=1e-3, msg=name)
    for (name, be), (_, bo) in zip(eager.named_buffers(), ours_inner.named_buffers()):
        torch.testing.assert_close(bo, be, rtol=1e-3, atol=1e-3, msg=name)
    return eager, ours


def test_mlp_with_batch_norm_matches_eager_for_20_adamw_steps():
    def batches(step):
        g = torch.Generator().manual_seed(step)
        b = 16 + step % 3  # a changing batch
        return torch.randn(b, 10, generator=g), torch.randint(0, 4, (b,), generator=g)

    # No bias before a BatchNorm: its gradient is exactly zero (BatchNorm removes any per-channel
    # shift), and AdamW turns the rounding noise of a zero gradient into +-lr steps that no two
    # implementations share.
    eager, ours = train_both(lambda: nn.Sequential(nn.Linear(10, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU(),
                                                   nn.Linear(32, 4)), batches)
    eager.eval(), ours.eval()
    x = torch.randn(5, 10)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), eager(x), rtol=1e-3, atol=1e-3)


class PoolNet(nn.Module):
    """BatchNorm2d + MaxPool + AvgPool + global average pool + Flatten + Linear on (N, 3, 16, 16)."""

    def __init__(self):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
        # Mixes channels at every pixel (there is no Conv yet); no bias before a BatchNorm (see above).
        self.mix = nn.Linear(3, 3, bias=False)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 5))

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(x)), 3, 2, 1)
        x = self.mix(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = F.avg_pool2d(F.relu(self.bn2(x)), 2)
        return self.head(x)


def test_pooling_cnn_with_batch_norm_matches_eager_for_20_adamw_steps():
    def batches(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 5, (8,), generator=g)

    train_both(PoolNet, batches)
