"""FusedAdam / FusedSGD with step_in_backward=True against torch's optimizers stepping after the backward.

Same model, seed and data; losses and parameters compared after every step. Through RTModule the
engine steps each parameter inside its backward (OptimizerInBackward); elsewhere a torch
post-accumulate-grad hook does. Both must give torch.optim.AdamW's / SGD's numbers.
"""

import copy

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt.optim import step_in_backward
from parity import assert_params_close
from test_rtmodule import MLP, TinyGPT


def mlp_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g)


def gpt_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randint(0, 40, (2, 12), generator=g), torch.randint(0, 40, (2, 12), generator=g)


def eager_step(model, optimizer, batch, scheduler=None):
    loss = model(*batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if scheduler:
        scheduler.step()
    return loss.item()


def fused_step(model, optimizer, batch, scheduler=None):
    """The same loop: step() and zero_grad() stay, and must do nothing."""
    loss = model(*batch)
    optimizer.zero_grad()
    loss.backward()
    params = [p.detach().clone() for p in optimizer.param_groups[0]["params"]]
    optimizer.step()
    for p, before in zip(optimizer.param_groups[0]["params"], params):
        assert p.grad is None
        assert torch.equal(p, before), "step() changed a parameter the backward already stepped"
    if scheduler:
        scheduler.step()
    return loss.item()


def compare(make, batch, steps, make_optimizers, wrap=True, make_schedulers=None, rtol=1e-4):
    """Trains make() eagerly with make_optimizers(...)[0] and a deep copy (through RTModule when wrap)
    with [1]; compares losses and parameters after every step (assert_params_close: Adam's first
    steps turn a gradient element near eps, where the engine's and torch's roundings differ, into
    updates of up to lr that differ by more than rtol elementwise). Returns the models and optimizers."""
    torch.manual_seed(0)
    eager = make()
    inner = copy.deepcopy(eager)
    ours = trainrt.RTModule(inner) if wrap else inner
    opt_e, opt_o = make_optimizers(eager, inner)
    sched_e, sched_o = make_schedulers(opt_e, opt_o) if make_schedulers else (None, None)
    for step in range(steps):
        le = eager_step(eager, opt_e, batch(step), sched_e)
        lo = fused_step(ours, opt_o, batch(step), sched_o)
        assert lo == pytest.approx(le, rel=rtol), f"step {step}: {lo} vs {le}"
        assert_params_close(eager, inner)
    if wrap:
        assert ours.fallback_reason is None, ours.fallback_reason
    return eager, inner, opt_e, opt_o


def adamw_pair(lr=1e-2, weight_decay=0.01):
    return lambda e, o: (torch.optim.AdamW(e.parameters(), lr=lr, weight_decay=weight_decay),
                         trainrt.optim.FusedAdam(o.parameters(), lr=lr, weight_decay=weight_decay,
                                                 step_in_backward=True))


def stepped_by(p):
    """Which path stepped p last: "engine" (RTModule's backward) or "torch" (the hook)."""
    return step_in_backward._stepped_in[p][1]


def test_mlp_matches_adamw_step_after_step_and_the_engine_steps_it():
    _, inner, _, _ = compare(MLP, mlp_batch, 12, adamw_pair())
    assert {stepped_by(p) for p in inner.parameters()} == {"engine"}


def test_same_bits_as_fused_adam_stepping_after_the_engines_backward():
    """The same gradients and the same adam_step, per parameter instead of per group: equal bits."""
    torch.manual_seed(0)
    a = MLP()
    b = copy.deepcopy(a)
    rt_a, rt_b = trainrt.RTModule(a), trainrt.RTModule(b)
    opt_a = trainrt.optim.FusedAdam(a.parameters(), lr=1e-2, weight_decay=0.1)
    opt_b = trainrt.optim.FusedAdam(b.parameters(), lr=1e-2, weight_decay=0.1, step_in_backward=True)
    for step in range(10):
        assert fused_step(rt_b, opt_b, mlp_batch(step)) == eager_step(rt_a, opt_a, mlp_batch(step))
        for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
            assert torch.equal(pa, pb), f"step {step}: {name}"


def test_tiny_gpt_with_tied_weights_groups_and_a_scheduler():
    def optimizers(e, o):
        def groups(m, **extra):
            decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
            no_decay = [p for n, p in m.named_parameters() if p.dim() < 2]
            return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0, "lr": 3e-3}]

        return (torch.optim.AdamW(groups(e), lr=1e-2),
                trainrt.optim.FusedAdam(groups(o), lr=1e-2, step_in_backward=True))

    def schedulers(a, b):
        return (torch.optim.lr_scheduler.StepLR(a, step_size=3, gamma=0.5),
                torch.optim.lr_scheduler.StepLR(b, step_size=3, gamma=0.5))

    _, inner, _, opt = compare(TinyGPT, gpt_batch, 12, optimizers, make_schedulers=schedulers, rtol=2e-4)
    assert inner.head.weight is inner.wte.weight  # one parameter, one step per backward
    assert float(opt.state[inner.wte.weight]["step"]) == 12
    assert stepped_by(inner.wte.weight) == "engine"


def test_frozen_parameters_stay_and_the_rest_match():
    def make():
        m = MLP()
        m.net[0].weight.requires_grad_(False)
        return m

    def optimizers(e, o):
        trainable = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731
        return (torch.optim.AdamW(trainable(e), lr=1e-2),
                trainrt.optim.FusedAdam(trainable(o), lr=1e-2, step_in_backward=True))

    eager, inner, _, _ = compare(make, mlp_batch, 10, optimizers)
    torch.testing.assert_close(inner.net[0].weight, eager.net[0].weight, rtol=0, atol=0)


def test_plain_torch_module_steps_from_the_hook():
    _, inner, _, _ = compare(MLP, mlp_batch, 10, adamw_pair(), wrap=False)
    assert {stepped_by(p) for p in inner.parameters()} == {"torch"}


class ScaledOutside(nn.Module):
    """An RTModule inside, and a parameter used only outside it (its gradient comes from torch)."""

    def __init__(self, inner=None):
        super().__init__()
        self.inner = inner or MLP()
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x, y):
        return self.inner(x, y) * self.scale


def test_parameters_outside_the_rtmodule_step_from_the_hook():
    torch.manual_seed(0)
    eager = ScaledOutside()
    ours = copy.deepcopy(eager)
    ours.inner = trainrt.RTModule(ours.inner)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_o = trainrt.optim.FusedAdam(ours.parameters(), lr=1e-2, weight_decay=0.01, step_in_backward=True)
    for step in range(10):
        le, lo = eager_step(eager, opt_e, mlp_batch(step)), fused_step(ours, opt_o, mlp_batch(step))
        assert lo == pytest.approx(le, rel=1e-4)
        assert_params_close(eager, ours)
    assert stepped_by(ours.scale) == "torch"
    assert stepped_by(ours.inner.net[0].weight) == "engine"


def test_a_parameter_with_gradients_from_two_places_is_refused():
    torch.manual_seed(0)
    model = MLP()
    rt = trainrt.RTModule(model)
    optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=1e-2, step_in_backward=True)
    x, y = mlp_batch(0)
    loss = rt(x, y) + model.net[4].bias.square().sum()  # the bias is used outside the module too
    twice = r"stepped twice in one backward \((engine|torch) stepped it, now (torch|engine)\)"
    with pytest.raises(RuntimeError, match=twice):
        loss.backward()
    x2, y2 = mlp_batch(1)
    with pytest.raises(RuntimeError, match=r"stepped twice in one backward \(engine stepped it, now engine\)"):
        (rt(x, y) + rt(x2, y2)).backward()  # two calls: the second backward would read stepped weights
    assert step_in_backward.owner_of(model.net[0].weight) is optimizer  # alive (the registry is weak) until here


def test_sgd_with_momentum_matches_torch():
    def optimizers(e, o):
        return (torch.optim.SGD(e.parameters(), lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3),
                trainrt.optim.FusedSGD(o.parameters(), lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3,
                                       step_in_backward=True))

    _, inner, opt_e, opt_o = compare(MLP, mlp_batch, 10, optimizers)
    p = inner.net[0].weight
    torch.testing.assert_close(opt_o.state[p]["momentum_buffer"],
                               opt_e.state[list(opt_e.state)[0]]["momentum_buffer"], rtol=1e-4, atol=1e-6)


def test_state_dict_round_trips_with_torch_adamw():
    eager, inner, opt_e, opt_o = compare(MLP, mlp_batch, 5, adamw_pair())
    saved = opt_o.state_dict()
    assert set(saved["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    # Ours loads into torch's AdamW and theirs into ours; both continue in step.
    torch_opt = torch.optim.AdamW(eager.parameters(), lr=1e-2, weight_decay=0.01)
    torch_opt.load_state_dict(saved)
    for a, b in zip(torch_opt.state_dict()["state"].values(), opt_e.state_dict()["state"].values()):
        torch.testing.assert_close(a["exp_avg_sq"], b["exp_avg_sq"], rtol=1e-4, atol=1e-9)
    fresh = trainrt.optim.FusedAdam(inner.parameters(), lr=1e-2, weight_decay=0.01, step_in_backward=True)
    assert step_in_backward.owner_of(inner.net[0].weight) is fresh  # the last one made takes over
    fresh.load_state_dict(opt_e.state_dict())
    rt = trainrt.RTModule(inner)
    for step in range(5, 8):
        le, lo = eager_step(eager, torch_opt, mlp_batch(step)), fused_step(rt, fresh, mlp_batch(step))
        assert lo == pytest.approx(le, rel=1e-4)
    assert_params_close(eager, inner)


def test_refusals_name_the_problem():
    model = MLP()
    opt = trainrt.optim.FusedAdam(model.parameters(), step_in_backward=True)
    with pytest.raises(ValueError, match="step_in_backward=True"):
        trainrt.optim.FP16_Optimizer(opt)


def test_the_backward_never_holds_all_gradients():
    """Four (512, 512) f32 weights (1 MiB of gradient each) and 2 rows of activations: returned,
    the backward ends holding all four gradients; stepped inside it, at most about two are alive."""
    def make():
        return nn.Sequential(*[nn.Linear(512, 512, bias=False) for _ in range(4)])

    grad_bytes = 512 * 512 * 4
    x = torch.randn(2, 512)
    stats, returned = {}, {}
    for mode in (False, True):
        torch.manual_seed(0)
        model = make()
        rt = trainrt.RTModule(model)
        opt = trainrt.optim.FusedAdam(model.parameters(), step_in_backward=mode)
        for _ in range(2):
            rt(x).square().sum().backward()
            returned[mode] = sum(0 if p.grad is None else p.grad.nbytes for p in model.parameters())
            opt.step()
            opt.zero_grad()
        stats[mode] = rt.engines[0].programs.memory_stats()["backward"]
        del opt
    assert returned[False] == 4 * grad_bytes  # all four live when the backward ends
    assert returned[True] == 0
    assert stats[False]["output_bytes"] == stats[True]["output_bytes"] == 0  # none kept between steps
    assert stats[True]["planned_arena_bytes"] < 2.5 * grad_bytes
    held = {m: stats[m]["planned_arena_bytes"] + returned[m] for m in stats}
    assert held[True] < held[False] - grad_bytes


def test_the_hook_path_refuses_what_fused_adam_refuses_naming_the_parameter():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[1].weight.data = model[1].weight.data.t().contiguous().t()  # non-contiguous: no in-place step
    optimizer = trainrt.optim.FusedAdam(model.parameters(), step_in_backward=True)
    with pytest.raises(ValueError, match=r"parameter 2 of param_groups\[0\].*strides"):
        model(torch.randn(3, 4)).sum().backward()
    assert step_in_backward.owner_of(model[1].weight) is optimizer  # the registry is weak: keep it alive
