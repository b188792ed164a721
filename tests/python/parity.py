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
