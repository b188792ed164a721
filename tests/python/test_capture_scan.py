"""Capture of torch.diff and torch.cumsum (ops_scan.py): the engine's outputs and gradients equal torch's."""

import copy

import pytest
import torch
from torch import nn

import trainrt
from test_capture import Lambda, assert_like_torch, randn

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_diff_of_any_order_dim_and_dtype_with_prepend_and_append():
    """n = 0, 1, 2, and n past the dim's length (an empty dim); negative and positive dims; int,
    bool (torch's not-equal) and float; prepend/append of another dtype, promoted as torch.cat does."""
    def fn(x, ids, mask):
        first = ids[:, :1] - 1
        return (torch.diff(x), torch.diff(x, n=2, dim=1), torch.diff(x, n=0), torch.diff(x, n=7, dim=-1),
                torch.diff(ids, prepend=first, dim=-1), torch.diff(ids, n=2, append=ids[:, -2:]),
                torch.diff(x, dim=0, prepend=x[:1] * 2, append=x[-1:] + 1), torch.diff(mask, dim=1),
                torch.diff(x, prepend=ids[..., None].expand(-1, -1, 2).float(), dim=2),
                torch.diff(x, prepend=torch.zeros(x.shape[0], 3, 1, dtype=torch.float64)))
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 3, 6), torch.arange(b * 3).view(b, 3) ** 2,
                                             randn(b, 5, seed=1) > 0))


def test_cumsum_of_every_dim_and_dtype():
    """Float sums in float; bool and integer sums in int64 (torch's default), or in dtype= when given;
    HF's packed-sequence pattern `(diff(pos, prepend=pos[:, :1] - 1) != 1).cumsum(-1)`."""
    def fn(x, ids, mask):
        packed = (torch.diff(ids, prepend=ids[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        return (x.cumsum(0), x.cumsum(-1), torch.cumsum(x, 1), mask.cumsum(1), ids.int().cumsum(0),
                torch.cumsum(ids, 1, dtype=torch.float32), torch.cumsum(x, 2, dtype=torch.float64), packed)
    assert_like_torch(Lambda(fn), lambda b: (randn(b, 3, 6), torch.arange(b * 5).view(b, 5) % 4,
                                             randn(b, 5, seed=1) > 0))


def assert_gradients_like_torch(module: nn.Module):
    """One forward + backward of `module` (input (3, 4, 5) -> scalar) in torch and in the engine:
    the loss, the input's gradient and every parameter's gradient agree."""
    torch.manual_seed(0)
    ours = trainrt.RTModule(copy.deepcopy(module))
    x_e, x_o = randn(3, 4, 5).requires_grad_(), randn(3, 4, 5).requires_grad_()
    loss_e, loss_o = module(x_e), ours(x_o)
    loss_e.backward()
    loss_o.backward()
    assert ours.fallback_reason is None
    torch.testing.assert_close(loss_o, loss_e)
    torch.testing.assert_close(x_o.grad, x_e.grad)
    for (name, p_e), (_, p_o) in zip(module.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(p_o.grad, p_e.grad, msg=name)


def test_diff_gradient_equals_torch():
    """Through Slice, Sub and Concat: d/dx and d/dprepend of a weighted sum of a third-order diff."""
    class Diffs(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(randn(3, 1, 5, seed=2))

        def forward(self, x):
            d = torch.diff(x * 2, n=3, dim=-2, prepend=self.p.expand(x.shape[0], 1, 5), append=x[:, :1])
            return (d * torch.arange(d.numel()).view(d.shape)).sum()

    assert_gradients_like_torch(Diffs())


def test_cumsum_gradient_equals_torch():
    """Through CumSum (reverse CumSum of the output gradient), on the batch dim and the last."""
    class Sums(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(randn(4, 5, seed=3))

        def forward(self, x):
            y = torch.cumsum(x * self.w, -1) + torch.cumsum(x, 0) ** 2
            return (y * torch.arange(y.numel()).view(y.shape)).sum()

    assert_gradients_like_torch(Sums())
