"""trainrt.optim.FusedAdam / FusedSGD against torch.optim (and transformers' AdamW, written out below).

How the parity is measured. Two f32 implementations of the same step differ by a few rounding errors
per step, and over 100 independent steps those differences random-walk; a parameter that the updates
carry through zero then shows an arbitrarily large relative difference although both runs are right
to f32 precision. So, as the C++ reference tests do (src/trainrt/optim/optim_testing.h), every one of
the 100 steps starts torch's optimizer from FusedAdam's exact state (parameters and buffers copied in),
runs one step of each, and compares the two f32 results elementwise against the magnitude of what the
step computes: the same formula evaluated in float64 on the absolute values of its terms (running
error analysis). A result without cancellation is thereby held to the plain relative error 1e-6; one
that lands near zero because p and lr * update nearly cancel is held to 1e-6 of the terms it came
from, the precision its inputs carry. The float64 formula is also checked against torch's result, so
the reference is the right formula. FusedAdam's own state is never reset: its 100-step trajectory is
its own, and a separate test compares whole trajectories with a tolerance for that drift.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

import trainrt
from trainrt import _C
from trainrt.optim import AdamWMode, FusedAdam, FusedLamb, FusedSGD

# Scalar, empty, odd sizes, 2-d and 3-d shapes, and ~1M elements (as the C++ tests).
SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 0, 3), (17, 33), (64, 16), (33, 65, 7), (1024, 1025)]
RTOL = 1e-6


def make_params(shapes=SHAPES, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.rand(s, generator=gen) * 2 - 1) for s in shapes]


def fill_grads(params, step, seed=1, scale=1.0):
    """Gradients whose magnitude changes from step to step (1e-4 .. 3), about 1 in 16 exactly zero."""
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    magnitude = 10 ** (-4 + 4.5 * torch.rand((), generator=gen).item()) * scale
    for p in params:
        g = (torch.rand(p.shape, generator=gen) * 2 - 1) * magnitude
        g[torch.rand(p.shape, generator=gen) < 1 / 16] = 0
        p.grad = g


def clone_params(params):
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


# --- float64 references with magnitudes (running error analysis) ---------------------------------


class Tracked:
    """A float64 value and its magnitude: the same expression on the absolute values of its terms."""

    def __init__(self, value, magnitude=None):
        self.value = value.double() if torch.is_tensor(value) else torch.tensor(float(value), dtype=torch.float64)
        self.magnitude = self.value.abs() if magnitude is None else magnitude

    @staticmethod
    def of(x):
        return x if isinstance(x, Tracked) else Tracked(x)

    def __add__(self, o):
        o = Tracked.of(o)
        return Tracked(self.value + o.value, self.magnitude + o.magnitude)

    __radd__ = __add__

    def __sub__(self, o):
        o = Tracked.of(o)
        return Tracked(self.value - o.value, self.magnitude + o.magnitude)

    def __rsub__(self, o):
        return Tracked.of(o) - self

    def __mul__(self, o):
        o = Tracked.of(o)
        return Tracked(self.value * o.value, self.magnitude * o.magnitude)

    __rmul__ = __mul__

    def __truediv__(self, o):  # divisors here are positive sums (sqrt(v) + eps), accurate to an ulp
        o = Tracked.of(o)
        return Tracked(self.value / o.value, self.magnitude / o.value.abs())

    def sqrt(self):
        return Tracked(self.value.sqrt(), self.magnitude.sqrt())

    def maximum(self, o):
        take = self.value >= o.value
        return Tracked(torch.where(take, self.value, o.value), torch.where(take, self.magnitude, o.magnitude))


def adam_reference(p, g, state, group, step):
    """One Adam step in float64 from the f32 state before it (torch/optim/adam.py; transformers' AdamW).

    Returns the Tracked param, exp_avg, exp_avg_sq and max_exp_avg_sq (None without amsgrad)."""
    lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    mode = AdamWMode(group["adam_w_mode"])
    bc1 = 1 - beta1**step if group["bias_correction"] else 1.0
    bc2 = 1 - beta2**step if group["bias_correction"] else 1.0
    zeros = torch.zeros_like(p)
    p = Tracked(p)
    g = Tracked(-g if group["maximize"] else g)
    m, v = Tracked(state.get("exp_avg", zeros)), Tracked(state.get("exp_avg_sq", zeros))
    if mode == AdamWMode.ADAM_L2_REGULARIZATION:
        g = g + wd * p
    if mode == AdamWMode.ADAMW_TORCH:
        p = p * (1 - lr * wd)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    v_max = Tracked(state.get("max_exp_avg_sq", zeros)).maximum(v) if group["amsgrad"] else None
    vd = v_max if group["amsgrad"] else v
    if mode == AdamWMode.ADAMW_TRANSFORMERS:
        p = p - (lr * math.sqrt(bc2) / bc1) * m / (vd.sqrt() + eps)
        p = p - lr * wd * p
    else:
        p = p - (lr / bc1) * m / (vd.sqrt() / math.sqrt(bc2) + eps)
    return p, m, v, v_max


def sgd_reference(p, g, state, group):
    """One torch.optim.SGD step in float64 (torch/optim/sgd.py, _single_tensor_sgd)."""
    lr, momentum, dampening, wd = group["lr"], group["momentum"], group["dampening"], group["weight_decay"]
    p = Tracked(p)
    g = Tracked(-g if group["maximize"] else g)
    g = g + wd * p
    buf = None
    if momentum != 0:
        old = state.get("momentum_buffer")
        buf = g if old is None else momentum * Tracked(old) + (1 - dampening) * g
        g = g + momentum * buf if group["nesterov"] else buf
    return p - lr * g, buf


def check_close(actual, expected, reference: Tracked, what):
    """|actual - expected| and |reference - expected| within RTOL of the reference's magnitude.

    Magnitudes below the smallest normal f32 count as that value (subnormals carry fewer bits).
    Returns the largest relative error seen."""
    scale = reference.magnitude.clamp_min(torch.finfo(torch.float32).tiny)
    err = ((actual.double() - expected.double()).abs() / scale).max().item() if actual.numel() else 0.0
    ref_err = ((reference.value - expected.double()).abs() / scale).max().item() if actual.numel() else 0.0
    assert err <= RTOL, f"{what}: relative error {err:.3g} against torch"
    assert ref_err <= RTOL, f"{what}: float64 reference off torch by {ref_err:.3g} (wrong formula?)"
    return err


# --- transformers' AdamW (transformers/optimization.py), the reference of ADAMW_TRANSFORMERS ------


class HuggingFaceAdamW(torch.optim.Optimizer):
    """transformers.AdamW.step as it was written (removed from transformers in v4.x), state named as torch's."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, correct_bias=True):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                step = state["step"].item()
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"]
                if group["correct_bias"]:
                    bias_correction1 = 1.0 - beta1**step
                    bias_correction2 = 1.0 - beta2**step
                    step_size = step_size * math.sqrt(bias_correction2) / bias_correction1
                p.addcdiv_(exp_avg, denom, value=-step_size)
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=(-group["lr"] * group["weight_decay"]))


# --- per-step parity ------------------------------------------------------------------------------


def sync_from(torch_opt, torch_params, fused, fused_params, checked):
    """torch_opt's parameters and state := copies of the fused optimizer's (same f32 values), for the
    parameters checked at this step; the others get no gradient, so torch_opt leaves them alone."""
    for q, p, c in zip(torch_params, fused_params, checked):
        if not c:
            q.grad = None
            continue
        q.data.copy_(p.detach())
        q.grad = p.grad.clone() if p.grad is not None else None
        torch_opt.state[q] = {k: v.clone() for k, v in fused.state[p].items()}


def run_adam_parity(fused_kwargs, make_torch, steps=100, shapes=SHAPES, grad_scale=1.0):
    params = make_params(shapes)
    fused = FusedAdam(params, **fused_kwargs)
    torch_params = clone_params(params)
    reference = make_torch(torch_params)
    group = fused.param_groups[0]
    worst = 0.0
    for step in range(1, steps + 1):
        fill_grads(params, step, scale=grad_scale)
        # The 1M-element parameter is checked at steps 1-3 and every 25th (as the C++ tests).
        checked = [p.numel() < 100_000 or step <= 3 or step % 25 == 0 for p in params]
        sync_from(reference, torch_params, fused, params, checked)
        expected = [adam_reference(p.detach(), p.grad, fused.state[p], group, step) if c else None
                    for p, c in zip(params, checked)]
        fused.step()
        reference.step()
        for i, (p, q, e) in enumerate(zip(params, torch_params, expected)):
            s, t = fused.state[p], reference.state[q]
            assert s["step"].dtype == torch.float32 and s["step"].item() == step
            if e is None:
                continue
            where = f"shape {tuple(p.shape)} step {step}"
            worst = max(worst, check_close(p, q, e[0], f"{where} param"))
            worst = max(worst, check_close(s["exp_avg"], t["exp_avg"], e[1], f"{where} exp_avg"))
            worst = max(worst, check_close(s["exp_avg_sq"], t["exp_avg_sq"], e[2], f"{where} exp_avg_sq"))
            if group["amsgrad"]:
                worst = max(worst, check_close(s["max_exp_avg_sq"], t["max_exp_avg_sq"], e[3],
                                               f"{where} max_exp_avg_sq"))
            assert ("max_exp_avg_sq" in s) == group["amsgrad"]
    return worst


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_torch_mode_matches_torch_adamw(weight_decay, amsgrad):
    kw = dict(lr=1e-2, weight_decay=weight_decay, amsgrad=amsgrad)
    run_adam_parity(dict(kw, adam_w_mode=AdamWMode.ADAMW_TORCH),
                    lambda ps: torch.optim.AdamW(ps, **kw, foreach=False))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_l2_mode_matches_torch_adam(weight_decay, amsgrad):
    kw = dict(lr=1e-2, weight_decay=weight_decay, amsgrad=amsgrad)
    run_adam_parity(dict(kw, adam_w_mode=AdamWMode.ADAM_L2_REGULARIZATION),
                    lambda ps: torch.optim.Adam(ps, **kw, foreach=False))


@pytest.mark.parametrize("correct_bias", [True, False])
def test_transformers_mode_matches_transformers_adamw(correct_bias):
    kw = dict(lr=1e-2, eps=1e-6, weight_decay=0.1)
    run_adam_parity(dict(kw, adam_w_mode=AdamWMode.ADAMW_TRANSFORMERS, bias_correction=correct_bias),
                    lambda ps: HuggingFaceAdamW(ps, **kw, correct_bias=correct_bias))


def test_betas_eps_and_maximize_match_torch():
    kw = dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, maximize=True)
    run_adam_parity(kw, lambda ps: torch.optim.AdamW(ps, **kw, foreach=False), steps=30)


def test_tiny_gradients_where_eps_dominates_match_torch():
    run_adam_parity(dict(lr=1e-2, weight_decay=0.01), lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01),
                    steps=30, grad_scale=1e-9)


def test_torch_modes_without_bias_correction_match_reference():
    """torch has no such switch: the float64 reference with bc1 = bc2 = 1 is the reference."""
    for mode in (AdamWMode.ADAM_L2_REGULARIZATION, AdamWMode.ADAMW_TORCH):
        params = make_params(SHAPES[:-1])
        fused = FusedAdam(params, lr=1e-2, weight_decay=0.1, adam_w_mode=mode, bias_correction=False)
        group = fused.param_groups[0]
        for step in range(1, 21):
            fill_grads(params, step)
            expected = [adam_reference(p.detach(), p.grad, fused.state[p], group, step) for p in params]
            fused.step()
            for p, e in zip(params, expected):
                check_close(p, e[0].value, e[0], f"mode {mode.name} step {step}")


# --- FusedSGD -------------------------------------------------------------------------------------

SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    dict(lr=0.05, momentum=0.5, maximize=True),
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_fused_sgd_matches_torch_sgd(kw):
    params = make_params()
    fused = FusedSGD(params, **kw)
    torch_params = clone_params(params)
    reference = torch.optim.SGD(torch_params, **kw, foreach=False)
    group = fused.param_groups[0]
    for step in range(1, 101):
        fill_grads(params, step)
        checked = [p.numel() < 100_000 or step <= 3 or step % 25 == 0 for p in params]
        sync_from(reference, torch_params, fused, params, checked)
        expected = [sgd_reference(p.detach(), p.grad, fused.state[p], group) if c else None
                    for p, c in zip(params, checked)]
        fused.step()
        reference.step()
        for p, q, e in zip(params, torch_params, expected):
            s, t = fused.state[p], reference.state[q]
            assert set(s) == set(t)  # momentum_buffer exactly when momentum != 0; no step counter
            if e is None:
                continue
            check_close(p, q, e[0], f"shape {tuple(p.shape)} step {step} param")
            if "momentum_buffer" in s:
                check_close(s["momentum_buffer"], t["momentum_buffer"], e[1], f"shape {tuple(p.shape)} step {step} buf")


# --- whole trajectories, groups, schedulers ------------------------------------------------------


def assert_trajectories_close(params, torch_params, tol=1e-5):
    """Independent runs drift apart by rounding: compare against each tensor's largest value."""
    for p, q in zip(params, torch_params):
        if p.numel():
            scale = q.detach().abs().max().clamp_min(1e-30)
            assert ((p - q).abs().max() / scale).item() <= tol, f"shape {tuple(p.shape)}"


def train(opt, params, steps, first=1, scheduler=None):
    for step in range(first, first + steps):
        fill_grads(params, step)
        opt.step()
        if scheduler is not None:
            scheduler.step()


def test_independent_100_step_trajectories_stay_close():
    params, torch_params = make_params(), None
    torch_params = clone_params(params)
    train(FusedAdam(params, lr=1e-2, weight_decay=0.1), params, 100)
    train(torch.optim.AdamW(torch_params, lr=1e-2, weight_decay=0.1), torch_params, 100)
    assert_trajectories_close(params, torch_params)


def groups_of(params):
    return [
        {"params": params[:4]},
        {"params": params[4:8], "lr": 3e-2, "weight_decay": 0.0},
        {"params": params[8:], "lr": 1e-3, "betas": (0.8, 0.99)},
    ]


def test_param_groups_with_their_own_options():
    params = make_params()
    torch_params = clone_params(params)
    fused = FusedAdam(groups_of(params), lr=1e-2, weight_decay=0.1)
    reference = torch.optim.AdamW(groups_of(torch_params), lr=1e-2, weight_decay=0.1)
    train(fused, params, 20)
    train(reference, torch_params, 20)
    assert_trajectories_close(params, torch_params)


def test_add_param_group_and_grad_none_params_are_skipped():
    params = make_params(SHAPES[:6])
    torch_params = clone_params(params)
    fused = FusedAdam(params[:3], lr=1e-2)
    reference = torch.optim.AdamW(torch_params[:3], lr=1e-2, weight_decay=0.0)
    train(fused, params, 5)
    train(reference, torch_params, 5)
    fused.add_param_group({"params": params[3:], "lr": 5e-2, "adam_w_mode": AdamWMode.ADAM_L2_REGULARIZATION})
    reference.add_param_group({"params": torch_params[3:], "lr": 5e-2})
    for step in range(6, 12):
        fill_grads(params, step)
        fill_grads(torch_params, step)
        params[1].grad = torch_params[1].grad = None  # no gradient: untouched, step not counted
        fused.step()
        reference.step()
    assert_trajectories_close(params, torch_params)
    assert fused.state[params[1]]["step"].item() == 5
    assert fused.state[params[4]]["step"].item() == 6
    assert fused.param_groups[1]["adam_w_mode"] == 0 and type(fused.param_groups[1]["adam_w_mode"]) is int


def test_lr_scheduler_drives_the_group_lr():
    params = make_params(SHAPES[:-1])
    torch_params = clone_params(params)
    fused = FusedAdam(params, lr=1e-2, weight_decay=0.1)
    reference = torch.optim.AdamW(torch_params, lr=1e-2, weight_decay=0.1)
    fs = torch.optim.lr_scheduler.OneCycleLR(fused, max_lr=5e-2, total_steps=40)
    ts = torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=5e-2, total_steps=40)
    for step in range(1, 41):
        fill_grads(params, step)
        fill_grads(torch_params, step)
        fused.step()
        reference.step()
        fs.step()
        ts.step()
        assert fused.param_groups[0]["lr"] == reference.param_groups[0]["lr"]
        assert fused.param_groups[0]["betas"] == reference.param_groups[0]["betas"]  # OneCycle cycles beta1
    assert_trajectories_close(params, torch_params)


# --- state_dict both ways -------------------------------------------------------------------------


def saved(opt):
    """A state_dict as a checkpoint carries it: through torch.save / torch.load(weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_adam_state_dict_loads_into_torch_adamw(amsgrad):
    params = make_params(SHAPES[:-1])
    fused = FusedAdam(params, lr=1e-2, weight_decay=0.1, amsgrad=amsgrad)
    train(fused, params, 10)
    torch_params = clone_params(params)
    reference = torch.optim.AdamW(torch_params, lr=1.0, weight_decay=0.0)
    reference.load_state_dict(saved(fused))
    assert reference.param_groups[0]["lr"] == 1e-2 and reference.param_groups[0]["amsgrad"] == amsgrad
    for p, q in zip(params, torch_params):
        t = reference.state[q]
        assert t["step"].dtype == torch.float32 and t["step"].item() == 10
        assert torch.equal(t["exp_avg"], fused.state[p]["exp_avg"])
    train(fused, params, 10, first=11)
    train(reference, torch_params, 10, first=11)
    assert_trajectories_close(params, torch_params)


@pytest.mark.parametrize("torch_cls,mode", [(torch.optim.AdamW, AdamWMode.ADAMW_TORCH),
                                            (torch.optim.Adam, AdamWMode.ADAM_L2_REGULARIZATION)])
def test_torch_adam_state_dict_loads_into_fused_adam(torch_cls, mode):
    torch_params = make_params(SHAPES[:-1])
    reference = torch_cls(torch_params, lr=1e-2, weight_decay=0.1)
    train(reference, torch_params, 10)
    params = clone_params(torch_params)
    fused = FusedAdam(params, adam_w_mode=AdamWMode.ADAMW_TRANSFORMERS)
    fused.load_state_dict(saved(reference))
    # The saved group's hyperparameters win, as in torch; its decoupled_weight_decay names the mode.
    assert fused.param_groups[0]["adam_w_mode"] == mode and fused.param_groups[0]["weight_decay"] == 0.1
    train(fused, params, 10, first=11)
    train(reference, torch_params, 10, first=11)
    assert_trajectories_close(params, torch_params)
    assert all(fused.state[p]["step"].item() == 20 for p in params)


def test_sgd_state_dicts_load_both_ways():
    kw = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    params = make_params(SHAPES[:-1])
    fused = FusedSGD(params, **kw)
    train(fused, params, 5)
    torch_params = clone_params(params)
    reference = torch.optim.SGD(torch_params, lr=1.0)
    reference.load_state_dict(saved(fused))
    train(fused, params, 5, first=6)
    train(reference, torch_params, 5, first=6)
    assert_trajectories_close(params, torch_params)
    back = clone_params(torch_params)
    fused_again = FusedSGD(back, lr=1.0)
    fused_again.load_state_dict(saved(reference))
    train(fused_again, back, 5, first=11)
    train(reference, torch_params, 5, first=11)
    assert_trajectories_close(back, torch_params)


# --- in place, one engine call per group, zero_grad ------------------------------------------------


def test_one_engine_call_per_group_in_place(monkeypatch):
    params = make_params(SHAPES[:-1])
    fused = FusedAdam(groups_of(params), lr=1e-2)
    calls = []
    real = _C.adam_step

    def counting(names, ps, *args, **kwargs):
        calls.append(len(ps))
        return real(names, ps, *args, **kwargs)

    monkeypatch.setattr(_C, "adam_step", counting)
    fill_grads(params, 1)
    fused.step()
    assert calls == [4, 4, 1]
    def pointers(p):
        return p.data_ptr(), fused.state[p]["exp_avg"].data_ptr(), fused.state[p]["step"].data_ptr()

    before = {id(p): pointers(p) for p in params}
    fill_grads(params, 2)
    fused.step()
    assert calls == [4, 4, 1, 4, 4, 1]
    for p in params:
        assert before[id(p)] == pointers(p)


def test_gradients_that_require_grad_step_like_torch():
    """A gradient may itself require grad (backward(create_graph=True)); the engine reads it as it is."""
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(3, 5)), torch.nn.Parameter(torch.randn(3))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    fused = FusedAdam(ours, lr=1e-2, weight_decay=0.1)
    adamw = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    for step in range(3):
        for a, b in zip(ours, ref):
            g = torch.randn(a.shape)
            a.grad, b.grad = g.clone().requires_grad_(), g
        fused.step()
        adamw.step()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)


def test_zero_grad_follows_set_grad_none():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    FusedAdam([p]).zero_grad()
    assert p.grad is None
    p.grad = torch.ones(3)
    FusedAdam([p], set_grad_none=False).zero_grad()
    assert torch.equal(p.grad, torch.zeros(3))


# --- errors ----------------------------------------------------------------------------------------


def assert_untouched_after(opt, params, exc, match):
    before = [p.detach().clone() for p in params]
    with pytest.raises(exc, match=match):
        opt.step()
    assert all(torch.equal(b, p) for b, p in zip(before, params))
    assert all(len(opt.state[p]) == 0 for p in params)


@pytest.mark.parametrize("dtype", [torch.float64])  # f16 / bf16: test_fused_optim_16bit.py
@pytest.mark.parametrize("cls", [FusedAdam, FusedSGD])
def test_unsupported_dtype_names_the_parameter(cls, dtype):
    good = torch.nn.Parameter(torch.ones(4))
    bad = torch.nn.Parameter(torch.ones(2, 3, dtype=dtype))
    good.grad, bad.grad = torch.ones(4), torch.ones(2, 3, dtype=dtype)
    opt = cls([good, bad], lr=0.1, momentum=0.9) if cls is FusedSGD else cls([good, bad])
    dtype_name = str(dtype).replace(".", r"\.")
    assert_untouched_after(opt, [good, bad], TypeError,
                           rf"parameter 1 of param_groups\[0\] \({dtype_name}, shape \(2, 3\)\)")


@pytest.mark.parametrize("cls", [FusedAdam, FusedSGD, FusedLamb])
def test_bad_parameter_in_a_later_group_leaves_every_group_untouched(cls):
    first = torch.nn.Parameter(torch.ones(4))
    bad = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    first.grad, bad.grad = torch.ones(4), torch.ones(3, dtype=torch.float64)
    opt = cls([{"params": [first]}, {"params": [bad]}], lr=0.1)
    assert_untouched_after(opt, [first, bad], TypeError, rf"{cls.__name__} supports .* param_groups\[1\]")


def test_sparse_gradient_is_refused():
    emb = torch.nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    assert_untouched_after(FusedAdam(emb.parameters()), list(emb.parameters()), RuntimeError,
                           r"sparse gradients: parameter 0 of param_groups\[0\]")


def test_non_contiguous_parameter_is_refused():
    p = torch.nn.Parameter(torch.ones(3, 4).t())
    p.grad = torch.ones(4, 3)
    assert_untouched_after(FusedSGD([p], lr=0.1), [p], ValueError, r"contiguous: parameter 0 .*strides \(1, 4\)")


def test_non_cpu_parameter_is_refused():
    p = torch.nn.Parameter(torch.empty(3, device="meta"))
    p.grad = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match=r"runs on the CPU: parameter 0 of param_groups\[0\] .* is on meta"):
        FusedAdam([p]).step()


def test_loaded_state_of_wrong_shape_names_the_buffer():
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    opt = FusedAdam([p])
    opt.state[p] = {"step": torch.tensor(3.0), "exp_avg": torch.zeros(5), "exp_avg_sq": torch.zeros(4)}
    with pytest.raises(trainrt.ShapeError, match=r"state 'exp_avg' of parameter 'param_groups\[0\]\[0\]'"):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(4)) and opt.state[p]["step"].item() == 3


def test_invalid_hyperparameters_are_refused():
    p = [torch.nn.Parameter(torch.ones(2))]
    for kw in (dict(lr=-1.0), dict(eps=-1.0), dict(betas=(1.0, 0.999)), dict(betas=(0.9, -0.1)),
               dict(weight_decay=-1.0), dict(adam_w_mode=3)):
        with pytest.raises(ValueError):
            FusedAdam(p, **kw)
    for kw in (dict(lr=-1.0), dict(momentum=-1.0), dict(nesterov=True),
               dict(nesterov=True, momentum=0.9, dampening=0.1)):
        with pytest.raises(ValueError):
            FusedSGD(p, **kw)


def test_deepcopy_and_trainrt_optim_attribute():
    assert trainrt.optim.FusedAdam is FusedAdam
    params = make_params(SHAPES[:4])
    opt = FusedAdam(params)
    fill_grads(params, 1)
    opt.step()
    clone = copy.deepcopy(opt)
    assert clone.state_dict()["state"][3]["exp_avg"].data_ptr() != opt.state[params[3]]["exp_avg"].data_ptr()


def test_step_counter_follows_torch_default_dtype():
    """torch.optim keeps state["step"] in float64 when that is the default dtype; so does FusedAdam."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        p = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))
        opt = FusedAdam([p])
        for _ in range(2):
            p.grad = torch.ones(3, dtype=torch.float32)
            opt.step()
    finally:
        torch.set_default_dtype(previous)
    assert opt.state[p]["step"].dtype == torch.float64 and opt.state[p]["step"].item() == 2


def test_step_counter_that_is_not_a_count_is_refused():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    opt = FusedAdam([p])
    opt.state[p] = {"step": torch.tensor(2.5)}
    with pytest.raises(trainrt.InvalidModel, match=r"step counter of parameter 'param_groups\[0\]\[0\]' is 2.5"):
        opt.step()
