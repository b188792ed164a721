"""trainrt.optim.FusedLamb against a float64 reference of Apex FusedLAMB's semantics written out below.

The reference (lamb_reference) is the whole optimizer step in plain torch float64: the global gradient
norm over every group and the clip g / (norm / max_grad_norm), Adam moments with bias correction,
decoupled or L2 weight decay, the per-parameter trust ratio ||p|| / ||u|| (1 when either norm is 0,
and only where weight_decay != 0 unless use_nvlamb) and p - lr * ratio * u (apex/optimizers/
fused_lamb.py, apex/csrc/multi_tensor_lamb.cu). As in test_fused_optim.py, each of the 100 steps is
compared from FusedLamb's own state before it, elementwise against the magnitude of what the step
computes (running error analysis, Tracked), so 1e-6 is a plain relative error wherever nothing cancels.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

import trainrt
from trainrt import _C
from trainrt.optim import FusedLamb
from test_fused_optim import SHAPES, Tracked, clone_params, fill_grads, make_params

RTOL = 1e-6


def lamb_reference(opt: FusedLamb, checked=lambda p: True):
    """One FusedLamb step in float64 from the optimizer's state before it.

    Returns {param: (Tracked param, Tracked exp_avg, Tracked exp_avg_sq, trust ratio)} for every
    parameter with a gradient that is checked(param)."""
    grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
    norm = math.sqrt(sum(g.double().pow(2).sum().item() for g in grads))
    max_grad_norm = opt.defaults["max_grad_norm"]
    clip = norm / max_grad_norm if max_grad_norm > 0 and norm > max_grad_norm else 1.0
    expected = {}
    for group in opt.param_groups:
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None or not checked(p):
                continue
            state = opt.state[p]
            t = (state["step"].item() if "step" in state else 0) + 1
            bc1 = 1 - beta1**t if group["bias_correction"] else 1.0
            bc2 = 1 - beta2**t if group["bias_correction"] else 1.0
            zeros = torch.zeros_like(p)
            w = Tracked(p.detach())
            g = Tracked(p.grad) * (1.0 / clip)
            if not group["adam_w_mode"]:
                g = g + wd * w
            m = beta1 * Tracked(state.get("exp_avg", zeros)) + (1 - beta1) * g
            v = beta2 * Tracked(state.get("exp_avg_sq", zeros)) + (1 - beta2) * g * g
            u = (m / bc1) / ((v / bc2).sqrt() + eps)
            if group["adam_w_mode"]:
                u = u + wd * w
            w_norm, u_norm = w.value.norm().item(), u.value.norm().item()
            trust = group["use_nvlamb"] or wd != 0
            ratio = w_norm / u_norm if trust and w_norm > 0 and u_norm > 0 else 1.0
            expected[p] = (w - (lr * ratio) * u, m, v, ratio)
    return expected


def assert_close(actual, reference: Tracked, what):
    if actual.numel() == 0:
        return
    scale = reference.magnitude.clamp_min(torch.finfo(torch.float32).tiny)
    err = ((actual.double() - reference.value).abs() / scale).max().item()
    assert err <= RTOL, f"{what}: relative error {err:.3g} against the reference"


def run_parity(opt: FusedLamb, params, steps=100, grad_scale=1.0):
    """steps steps of opt, each checked against lamb_reference. Returns the trust ratios seen."""
    ratios = []
    for step in range(1, steps + 1):
        fill_grads(params, step, scale=grad_scale)
        # The 1M-element parameter is checked at steps 1-3 and every 25th (as the C++ tests).
        expected = lamb_reference(opt, lambda p: p.numel() < 100_000 or step <= 3 or step % 25 == 0)
        opt.step()
        for p in params:
            s = opt.state[p]
            assert s["step"].dtype == torch.float32 and s["step"].item() == step
            if p not in expected:
                continue
            e = expected[p]
            where = f"shape {tuple(p.shape)} step {step}"
            assert_close(p, e[0], f"{where} param")
            assert_close(s["exp_avg"], e[1], f"{where} exp_avg")
            assert_close(s["exp_avg_sq"], e[2], f"{where} exp_avg_sq")
            ratios.append(e[3])
    return ratios


@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_matches_reference_over_100_steps_with_clipping(adam_w_mode):
    params = make_params()
    opt = FusedLamb(params, lr=1e-2, weight_decay=0.01 if adam_w_mode else 0.1, adam_w_mode=adam_w_mode)
    ratios = run_parity(opt, params)
    assert any(r != 1.0 for r in ratios)


def test_matches_reference_without_clipping_and_with_max_grad_norm_off():
    for max_grad_norm in (1e9, 0.0):
        params = make_params(SHAPES[:-1])
        run_parity(FusedLamb(params, lr=1e-2, max_grad_norm=max_grad_norm), params, steps=30)


def test_param_groups_with_their_own_options():
    params = make_params()
    groups = [
        {"params": params[:3]},
        {"params": params[3:6], "lr": 3e-2, "weight_decay": 0.0},  # no trust ratio (Apex's rule)
        {"params": params[6:8], "adam_w_mode": False, "bias_correction": False, "betas": (0.8, 0.99)},
        {"params": params[8:], "lr": 1e-3, "weight_decay": 0.0, "use_nvlamb": True, "eps": 1e-4},
    ]
    opt = FusedLamb(groups, lr=1e-2, weight_decay=0.05)
    run_parity(opt, params, steps=100, grad_scale=1e-3)


def test_grad_scale_is_folded_into_norm_and_step():
    """step(grad_scale=s) (what FP16_Optimizer passes) equals a step on gradients multiplied by s."""
    params = make_params(SHAPES[:-1])
    scaled = clone_params(params)
    a, b = FusedLamb(params, lr=1e-2), FusedLamb(scaled, lr=1e-2)
    for step in range(1, 11):
        fill_grads(params, step, scale=4.0)
        fill_grads(scaled, step)
        a.step(grad_scale=0.25)
        b.step()
    for p, q in zip(params, scaled):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=0)


def test_one_global_norm_pass_and_one_engine_call_per_group(monkeypatch):
    params = make_params(SHAPES[:-1])
    opt = FusedLamb([{"params": params[:4]}, {"params": params[4:]}])
    calls = []
    real_step, real_norm = _C.lamb_step, _C.unscale_and_norm
    monkeypatch.setattr(_C, "lamb_step", lambda names, ps, *a, **k: calls.append(("step", len(ps))) or real_step(names, ps, *a, **k))
    monkeypatch.setattr(_C, "unscale_and_norm", lambda names, gs, s: calls.append(("norm", len(gs))) or real_norm(names, gs, s))
    fill_grads(params, 1)
    before = [p.data_ptr() for p in params]
    opt.step()
    assert calls == [("norm", 9), ("step", 4), ("step", 5)]
    assert before == [p.data_ptr() for p in params]


def test_state_dict_round_trip_continues_identically():
    params = make_params(SHAPES[:-1])
    opt = FusedLamb([{"params": params[:5]}, {"params": params[5:], "weight_decay": 0.0}], lr=1e-2)
    for step in range(1, 6):
        fill_grads(params, step)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert set(loaded["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    twins = clone_params(params)
    restored = FusedLamb([{"params": twins[:5]}, {"params": twins[5:]}], lr=1.0)
    restored.load_state_dict(loaded)
    assert restored.param_groups[1]["weight_decay"] == 0.0 and restored.param_groups[0]["lr"] == 1e-2
    for step in range(6, 11):
        fill_grads(params, step)
        fill_grads(twins, step)
        opt.step()
        restored.step()
    for p, q in zip(params, twins):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg_sq"], restored.state[q]["exp_avg_sq"])
        assert restored.state[q]["step"].item() == 10


def test_deepcopy_and_zero_grad():
    params = make_params(SHAPES[:4])
    opt = FusedLamb(params)
    fill_grads(params, 1)
    opt.step()
    clone = copy.deepcopy(opt)
    assert clone.state_dict()["state"][3]["exp_avg"].data_ptr() != opt.state[params[3]]["exp_avg"].data_ptr()
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    fill_grads(params, 2)
    FusedLamb(params, set_grad_none=False).zero_grad()
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in params)


def test_errors_name_the_parameter():
    good = torch.nn.Parameter(torch.ones(4))
    bad = torch.nn.Parameter(torch.ones(2, 3, dtype=torch.float64))
    good.grad, bad.grad = torch.ones(4), torch.ones(2, 3, dtype=torch.float64)
    opt = FusedLamb([good, bad])
    with pytest.raises(TypeError, match=r"parameter 1 of param_groups\[0\] \(torch\.float64, shape \(2, 3\)\)"):
        opt.step()
    assert torch.equal(good, torch.ones(4)) and len(opt.state[good]) == 0
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    opt = FusedLamb([p])
    opt.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros(3), "exp_avg_sq": torch.zeros(4)}
    with pytest.raises(trainrt.ShapeError, match=r"state 'exp_avg' of parameter 'param_groups\[0\]\[0\]'"):
        opt.step()
    for kw in (dict(lr=-1.0), dict(eps=-1.0), dict(betas=(1.0, 0.9)), dict(weight_decay=-0.1),
               dict(max_grad_norm=-1.0)):
        with pytest.raises(ValueError):
            FusedLamb([p], **kw)
