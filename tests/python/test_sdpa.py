"""F.scaled_dot_product_attention through trainrt.RTModule (the fused ScaledDotProductAttention op and
its gradient) against torch: outputs and Q/K/V gradients over causal, masked, broadcast, L != S and
grouped-head cases, and dropout's reproducibility, drop rate and mask reuse in the backward."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import trainrt
from trainrt.capture import capture

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Attention(nn.Module):
    """F.scaled_dot_product_attention with fixed keyword arguments; the mask is an input."""

    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def run_in_engine(module, *inputs):
    """The RTModule's output for inputs (leaves requiring grad become fresh leaves); fails if it fell back."""
    model = trainrt.RTModule(module)
    out = model(*inputs)
    assert model._fallback_reason is None, model._fallback_reason
    return out


def check_like_torch(kwargs, q_shape, kv_shape, v_dim=None, mask=None, rtol=1e-4, atol=1e-5, learn_mask=False):
    """Output and dQ, dK, dV of the engine equal torch's for one call; with learn_mask the float
    mask requires grad too and its gradient equals torch's."""
    v_shape = kv_shape[:-1] + (v_dim or kv_shape[-1],)
    q, k, v = randn(*q_shape, seed=1), randn(*kv_shape, seed=2), randn(*v_shape, seed=3)
    leaves = (q, k, v, mask) if learn_mask else (q, k, v)
    ours = [t.clone().requires_grad_() for t in leaves]
    theirs = [t.clone().requires_grad_() for t in leaves]
    got = run_in_engine(Attention(**kwargs), *ours[:3], ours[3] if learn_mask else mask)
    want = Attention(**kwargs)(*theirs[:3], theirs[3] if learn_mask else mask)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    d_out = randn(*want.shape, seed=4)
    got.backward(d_out)
    want.backward(d_out)
    for name, a, b in zip(["q", "k", "v", "mask"], ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol, msg=lambda m, n=name: f"d{n}: {m}")


@pytest.mark.parametrize("q_len, kv_len", [(16, 16), (7, 40), (150, 70)])
def test_causal_for_any_lengths(q_len, kv_len):
    check_like_torch({"is_causal": True}, (2, 3, q_len, 16), (2, 3, kv_len, 16))


def test_lengths_and_head_sizes_cross_blocks():
    check_like_torch({}, (1, 2, 130, 32), (1, 2, 257, 32), v_dim=24)
    check_like_torch({"scale": 0.3}, (2, 2, 5, 64), (2, 2, 9, 64))


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 33), (1, 1, 20, 33), (20, 33), (2, 3, 20, 33)])
def test_bool_masks_broadcast(mask_shape):
    mask = randn(*mask_shape, seed=5) > -0.5
    check_like_torch({}, (2, 3, 20, 16), (2, 3, 33, 16), mask=mask)


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 33), (1, 1, 20, 33), (20, 33), (2, 3, 20, 1)])
def test_float_additive_masks_broadcast(mask_shape):
    check_like_torch({}, (2, 3, 20, 16), (2, 3, 33, 16), mask=randn(*mask_shape, seed=6))


def test_fully_masked_rows_are_zero_like_torch():
    mask = randn(20, 33, seed=7) > -0.5
    mask[3] = False
    check_like_torch({}, (1, 2, 20, 8), (1, 2, 33, 8), mask=mask)


def test_grouped_query_heads():
    check_like_torch({"enable_gqa": True}, (2, 8, 19, 16), (2, 2, 23, 16))
    check_like_torch({"enable_gqa": True, "is_causal": True}, (1, 4, 70, 16), (1, 1, 70, 16))


def test_three_dim_inputs():
    check_like_torch({"is_causal": True}, (4, 12, 8), (4, 12, 8))


def test_capture_emits_the_fused_op():
    q = randn(2, 2, 5, 4, seed=1)
    model = capture(Attention(is_causal=True), (q, q, q), {}).model
    ops = [n.op_type for n in model.graph.node]
    assert "ScaledDotProductAttention" in ops and "Softmax" not in ops, ops
    # Rank 5 is beyond the fused op: the math spelling stays.
    q5 = randn(2, 2, 2, 5, 4, seed=1)
    ops5 = [n.op_type for n in capture(Attention(), (q5, q5, q5), {}).model.graph.node]
    assert "Softmax" in ops5 and "ScaledDotProductAttention" not in ops5, ops5


@pytest.mark.parametrize("kwargs, mask_shape", [({}, (20, 33)), ({}, (2, 3, 20, 33)), ({}, (1, 3, 20, 33)),
                                                ({"scale": 0.3}, (3, 1, 33)), ({"enable_gqa": True}, (2, 1, 1, 33))])
def test_a_learned_float_mask_gets_the_gradient_torch_gives_it(kwargs, mask_shape):
    """A mask that requires grad (a learned position bias, as T5's) runs in the engine: its
    gradient is the scores' gradient summed over the axes the mask was broadcast along."""
    kv_heads = 1 if kwargs.get("enable_gqa") else 3
    check_like_torch(kwargs, (2, 3, 20, 16), (2, kv_heads, 33, 16), mask=randn(*mask_shape, seed=8), learn_mask=True)


def identity_values(batch, heads, size):
    """V = I: the output rows are the (dropped) attention probabilities themselves."""
    return torch.eye(size).expand(batch, heads, size, size).contiguous()


def test_dropout_is_reproducible_under_manual_seed_and_drops_p():
    p, b, h, length = 0.3, 2, 2, 64
    q, k, v = randn(b, h, length, 16, seed=1), randn(b, h, length, 16, seed=2), identity_values(b, h, length)
    model = trainrt.RTModule(Attention(dropout_p=p))
    torch.manual_seed(0)
    first = model(q, k, v)
    torch.manual_seed(0)
    again = model(q, k, v)
    torch.manual_seed(1)
    other = model(q, k, v)
    assert model._fallback_reason is None, model._fallback_reason
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert (first != other).float().mean() > 0.25
    # Kept probabilities are scaled by 1 / (1 - p); about p of them are dropped.
    probabilities = Attention()(q, k, v)
    kept = first != 0
    torch.testing.assert_close(first[kept], probabilities[kept] / (1 - p), rtol=1e-5, atol=1e-6)
    assert abs((~kept).float().mean().item() - p) < 0.02  # 16384 draws: the deviation is 0.0036


def test_dropout_backward_reuses_the_forward_mask():
    """With V = I the output is P * Z exactly, so dV = out^T dO and dQ, dK follow torch's formula
    given that same dropped matrix."""
    p, b, h, length = 0.25, 1, 2, 40
    q, k = randn(b, h, length, 8, seed=1), randn(b, h, length, 8, seed=2)
    v = identity_values(b, h, length)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(3)
    out = run_in_engine(Attention(dropout_p=p), *ours)
    d_out = randn(*out.shape, seed=4)
    out.backward(d_out)
    dropped = out.detach()
    torch.testing.assert_close(ours[2].grad, dropped.transpose(-1, -2) @ d_out, rtol=1e-4, atol=1e-5)
    # torch with the engine's mask: softmax(q k^T s) * Z @ v, Z read off the engine's output.
    keep_scaled = torch.where(dropped != 0, torch.tensor(1 / (1 - p)), torch.tensor(0.0))
    theirs = [t.clone().requires_grad_() for t in (q, k)]
    weights = torch.softmax(theirs[0] @ theirs[1].transpose(-1, -2) / 8 ** 0.5, dim=-1)
    ((weights * keep_scaled) @ v).backward(d_out)
    torch.testing.assert_close(ours[0].grad, theirs[0].grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours[1].grad, theirs[1].grad, rtol=1e-4, atol=1e-5)
