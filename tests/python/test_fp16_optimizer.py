"""trainrt.optim.FP16_Optimizer against torch.amp.GradScaler (+ clip_grad_norm_) and the engine's gradient calls."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch.utils.dlpack import to_dlpack

from trainrt import _C
from trainrt.optim import FP16_Optimizer, FusedAdam, FusedSGD

INF, NAN = float("inf"), float("nan")


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(13, 33), torch.nn.Tanh(), torch.nn.Linear(33, 5))


def batch(step):
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 13, generator=gen), torch.randn(16, 5, generator=gen)


def loss_of(model, step):
    x, y = batch(step)
    return torch.nn.functional.mse_loss(model(x), y)


def inject(model, bad):
    """Puts inf / NaN into one gradient element (bad is None for a clean step)."""
    if bad is not None:
        grads = [p.grad for p in model.parameters()]
        grads[len(grads) // 2].view(-1)[3] = bad


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


INNER = {
    "FusedAdam": lambda ps: FusedAdam(ps, lr=1e-2, weight_decay=0.1),
    "FusedSGD": lambda ps: FusedSGD(ps, lr=1e-2, momentum=0.9),
    "torch.AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "torch.SGD": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),
}


# --- the engine calls ---------------------------------------------------------------------------


def test_unscale_and_norm_and_scale_grads():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen) * 1000 for s in [(), (0,), (7,), (33, 65), (1024, 1025)]]
    names = [f"g{i}" for i in range(len(grads))]
    expected = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item() / 1024
    norm, found_inf = _C.unscale_and_norm(names, [to_dlpack(g) for g in grads], 1 / 1024)
    assert not found_inf
    assert norm == pytest.approx(expected, rel=1e-12)
    assert _C.unscale_and_norm([], [], 0.5) == (0.0, False)
    scaled = [g * 0.375 for g in grads]
    _C.scale_grads(names, [to_dlpack(g) for g in grads], 0.375)
    for g, s in zip(grads, scaled):
        assert torch.equal(g, s)
    for bad in (INF, -INF, NAN):
        g = grads[-1].clone()
        g.view(-1)[777_777] = bad
        assert _C.unscale_and_norm(["x"], [to_dlpack(g)], 1.0)[1]
    big = torch.full((10,), torch.finfo(torch.float32).max)  # finite: no overflow in the double sum
    assert not _C.unscale_and_norm(["x"], [to_dlpack(big)], 1.0)[1]


# --- skipping -----------------------------------------------------------------------------------


@pytest.mark.parametrize("inner", list(INNER))
def test_overflowing_steps_are_skipped_exactly(inner):
    model = make_model()
    opt = FP16_Optimizer(INNER[inner](list(model.parameters())), initial_scale=2.0**12, growth_interval=4)
    bad_steps = {2: INF, 5: NAN, 6: -INF, 11: NAN}
    for step in range(14):
        before = snapshot(model)
        state_before = copy.deepcopy(opt.optimizer.state_dict())
        opt.zero_grad()
        opt.backward(loss_of(model, step))
        inject(model, bad_steps.get(step))
        opt.step()
        after = snapshot(model)
        assert opt.overflow == (step in bad_steps)
        if step in bad_steps:
            assert all(torch.equal(a, b) for a, b in zip(before, after)), f"step {step} changed a parameter"
            state_after = opt.optimizer.state_dict()["state"]
            assert state_before["state"].keys() == state_after.keys()
            for k, s in state_before["state"].items():
                for name, v in s.items():
                    assert torch.equal(torch.as_tensor(v), torch.as_tensor(state_after[k][name])), (step, name)
            assert not math.isfinite(opt.last_grad_norm)
        else:
            assert all(not torch.equal(a, b) for a, b in zip(before, after)), f"step {step} was not taken"
            assert all(torch.isfinite(p).all() for p in after)
    assert opt.skipped_steps == len(bad_steps)


# --- the scale trajectory -----------------------------------------------------------------------


@pytest.mark.parametrize("factors", [(2.0, 0.5), (1.7, 0.3)])
@pytest.mark.parametrize("inner", ["torch.SGD", "FusedSGD"])
def test_scale_trajectory_and_update_match_grad_scaler(inner, factors):
    growth, backoff = factors
    pattern = [0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]  # 1: overflowing step
    config = dict(growth_factor=growth, backoff_factor=backoff, growth_interval=3)

    ref_model, model = make_model(), make_model()
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=1e-2, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, **config)
    opt = FP16_Optimizer(INNER[inner](list(model.parameters())), initial_scale=2.0**10, **config)
    ref_scales, scales = [], []
    for step, bad in enumerate(pattern):
        ref_opt.zero_grad()
        scaler.scale(loss_of(ref_model, step)).backward()
        inject(ref_model, INF if bad else None)
        scaler.step(ref_opt)
        scaler.update()
        ref_scales.append(scaler.get_scale())

        opt.zero_grad()
        opt.backward(loss_of(model, step))
        inject(model, INF if bad else None)
        opt.step()
        scales.append(opt.get_scale())
        for r, p in zip(ref_model.parameters(), model.parameters()):
            torch.testing.assert_close(p, r, rtol=1e-6, atol=1e-7)
    assert scales == ref_scales
    assert opt.state_dict()["loss_scaler"]["growth_tracker"] == scaler.state_dict()["_growth_tracker"]


def test_hysteresis_backs_off_after_consecutive_overflows():
    model = make_model()
    opt = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=1e-3), initial_scale=1024.0, growth_interval=3,
                         hysteresis=2)
    # (overflow?, expected scale after the step)
    script = [(1, 1024), (0, 1024), (1, 1024), (1, 512), (1, 256), (0, 256), (0, 256), (1, 256), (0, 256),
              (0, 256), (0, 512), (1, 512), (1, 256)]
    for step, (bad, expected) in enumerate(script):
        opt.zero_grad()
        opt.backward(loss_of(model, step))
        inject(model, NAN if bad else None)
        opt.step()
        assert opt.overflow == bool(bad)
        assert opt.get_scale() == expected, f"step {step}"


def test_static_scale_stays_and_still_skips_overflows():
    model = make_model()
    opt = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=1e-3), static_loss_scale=128.0)
    for step, bad in enumerate([0, 1, 0, 0]):
        before = snapshot(model)
        opt.zero_grad()
        opt.backward(loss_of(model, step))
        inject(model, INF if bad else None)
        opt.step()
        assert opt.get_scale() == 128.0
        assert all(torch.equal(a, b) for a, b in zip(before, snapshot(model))) == bool(bad)
    assert FP16_Optimizer(torch.optim.SGD(model.parameters()), dynamic_loss_scale=False).get_scale() == 1.0


# --- clipping and parity ------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
@pytest.mark.parametrize("inner", ["FusedAdam", "torch.AdamW", "FusedSGD", "torch.SGD"])
def test_clipped_update_equals_clip_grad_norm_then_optimizer(inner, max_norm):
    torch_inner = "torch.AdamW" if "Adam" in inner else "torch.SGD"
    ref_model, model = make_model(), make_model()
    ref_opt = INNER[torch_inner](list(ref_model.parameters()))
    opt = FP16_Optimizer(INNER[inner](list(model.parameters())), initial_scale=2.0**14, max_grad_norm=max_norm)
    for step in range(8):
        ref_opt.zero_grad()
        loss_of(ref_model, step).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref_model.parameters(), max_norm)
        ref_opt.step()

        opt.zero_grad()
        opt.backward(loss_of(model, step))
        opt.step()
        assert opt.last_grad_norm == pytest.approx(ref_norm.item(), rel=1e-5)
        for r, p in zip(ref_model.parameters(), model.parameters()):
            torch.testing.assert_close(p, r, rtol=2e-5, atol=1e-6)
    if max_norm < 1:
        assert opt.last_grad_norm > max_norm  # clipping was active


def test_wrapped_torch_adamw_and_fused_adam_agree_through_overflows():
    a, b = make_model(), make_model()
    opt_a = FP16_Optimizer(torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1), initial_scale=2.0**8,
                           growth_interval=2, hysteresis=2, max_grad_norm=0.5)
    opt_b = FP16_Optimizer(FusedAdam(b.parameters(), lr=1e-2, weight_decay=0.1), initial_scale=2.0**8,
                           growth_interval=2, hysteresis=2, max_grad_norm=0.5)
    for step, bad in enumerate([0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 0, 0]):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            opt.backward(loss_of(model, step))
            inject(model, INF if bad else None)
            opt.step()
        assert opt_a.get_scale() == opt_b.get_scale() and opt_a.overflow == opt_b.overflow
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=2e-5, atol=1e-6)


# --- state --------------------------------------------------------------------------------------


@pytest.mark.parametrize("inner", ["FusedAdam", "torch.AdamW"])
def test_state_dict_round_trip(inner):
    model = make_model()
    kwargs = dict(initial_scale=2.0**9, growth_interval=3, hysteresis=2, max_grad_norm=1.0)
    opt = FP16_Optimizer(INNER[inner](list(model.parameters())), **kwargs)
    pattern = [0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0]

    def run(model, opt, steps):
        for step in steps:
            opt.zero_grad()
            opt.backward(loss_of(model, step))
            inject(model, INF if pattern[step] else None)
            opt.step()

    run(model, opt, range(6))
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    sd = saved["opt"]["loss_scaler"]
    assert sd["scale"] == opt.get_scale() and sd["growth_tracker"] == 0 and sd["hysteresis_tracker"] == 1

    clone = make_model(seed=5)
    clone.load_state_dict(saved["model"])
    clone_opt = FP16_Optimizer(INNER[inner](list(clone.parameters())))  # other defaults: all come from the dict
    clone_opt.load_state_dict(saved["opt"])
    assert clone_opt.state_dict()["loss_scaler"] == opt.state_dict()["loss_scaler"]
    run(model, opt, range(6, len(pattern)))
    run(clone, clone_opt, range(6, len(pattern)))
    assert clone_opt.get_scale() == opt.get_scale()
    for p, q in zip(model.parameters(), clone.parameters()):
        assert torch.equal(p, q)


def test_passthrough_and_errors():
    model = make_model()
    inner = FusedAdam(model.parameters(), lr=1e-3)
    opt = FP16_Optimizer(inner)
    assert opt.param_groups is inner.param_groups and opt.state is inner.state
    opt.param_groups[0]["lr"] = 5e-4
    assert inner.param_groups[0]["lr"] == 5e-4
    scheduler = torch.optim.lr_scheduler.StepLR(opt.optimizer, step_size=1, gamma=0.5)
    opt.backward(loss_of(model, 0))
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == 2.5e-4
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert opt.scale_loss(torch.tensor(3.0)).item() == 3.0 * 2.0**16

    half = torch.nn.Linear(4, 4).half()
    hopt = FP16_Optimizer(torch.optim.SGD(half.parameters(), lr=0.1))
    hopt.backward(half(torch.ones(2, 4, dtype=torch.float16)).float().sum())
    with pytest.raises(TypeError, match=r"float32 gradients only.*param_groups\[0\]\[0\].*torch.float16"):
        hopt.step()
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(lambda: None)
    with pytest.raises(ValueError, match="backoff_factor"):
        FP16_Optimizer(inner, backoff_factor=1.5)
    with pytest.raises(ValueError, match="hysteresis"):
        FP16_Optimizer(inner, hysteresis=0)
    with pytest.raises(TypeError):
        FP16_Optimizer(model)
