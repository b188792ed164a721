"""Training parity against PyTorch eager: the same model, seed, init and data through torch and RTModule."""

from __future__ import annotations

import copy

import pytest
import torch

import trainrt


def _step(model, optimizer, args) -> float:
    loss = model(*args)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def train_both(make, batches, steps: int = 20, lr: float = 1e-3):
    """Trains make() eagerly and a deep copy through RTModule with AdamW on the same batches;
    returns (eager model, the module RTModule wrapped, [(eager loss, RTModule loss) per step])."""
    torch.manual_seed(0)
    eager = make()
    ours_inner = copy.deepcopy(eager)
    ours = trainrt.RTModule(ours_inner)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=lr)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=lr)
    losses = [(_step(eager, opt_e, batches(i)), _step(ours, opt_o, batches(i))) for i in range(steps)]
    assert ours._fallback_reason is None, ours._fallback_reason
    return eager, ours_inner, losses


def assert_parity(eager, ours, losses, loss_rtol: float = 1e-4, param_rtol: float = 1e-3, atol: float = 1e-6):
    """Losses within loss_rtol relative at every step; final parameters and buffers within param_rtol."""
    for step, (le, lo) in enumerate(losses):
        assert lo == pytest.approx(le, rel=loss_rtol), f"step {step}: {lo} vs {le}"
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(po, pe, rtol=param_rtol, atol=atol, msg=name)
    for (name, be), (_, bo) in zip(eager.named_buffers(), ours.named_buffers()):
        torch.testing.assert_close(bo, be, rtol=param_rtol, atol=atol, msg=name)


def assert_params_close(eager, ours, rtol: float = 1e-3, atol: float = 1e-5):
    """Each parameter within rtol of its largest magnitude, plus atol. For attention models: the
    key bias has an exactly-zero gradient (softmax ignores a shift along the keys), so AdamW moves
    it by steps of rounding noise on both sides, which no two implementations share elementwise.
    A wrong gradient moves a weight by about lr = 1e-3 per step, far beyond atol."""
    for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
        scale = pe.detach().abs().max().item()
        err = (pe.detach() - po.detach()).abs().max().item()
        assert err <= rtol * scale + atol, f"{name}: max |diff| {err:.3g} vs max |param| {scale:.3g}"
