"""RTModule's autograd behaves as eager's: unused parameters, in-place misuse, retain_graph,
torch.autograd.grad and hooks. Each case runs through RTModule and the ORTModule import, with
fallback disabled (the engine ran it, or the test fails)."""

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt.ortmodule import ORTModule

WRAPPERS = [trainrt.RTModule, ORTModule]


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class WithUnused(nn.Module):
    """A Linear, plus a parameter and a frozen Linear the forward never reads."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.unused = nn.Parameter(torch.randn(4))
        self.spare = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        return self.fc(x) * self.scale


def _tanh_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2), nn.Tanh())


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_a_parameter_the_forward_never_reads_gets_grad_none(wrap):
    torch.manual_seed(0)
    eager = WithUnused()
    model = wrap(WithUnused())
    model.load_state_dict(eager.state_dict())
    x = torch.randn(5, 3)
    eager(x).pow(2).sum().backward()
    model(x).pow(2).sum().backward()
    assert model.fallback_reason is None
    for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
        if pe.grad is None:
            assert pm.grad is None, name
        else:
            torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6)
    assert model.unused.grad is None and model.spare.weight.grad is None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_a_parameter_read_only_through_detach_gets_grad_none(wrap):
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.offset = nn.Parameter(torch.randn(2))

        def forward(self, x):
            return self.fc(x) + self.offset.detach()

    model = wrap(Detached())
    model(torch.randn(4, 3)).sum().backward()
    assert model.fallback_reason is None
    assert model.offset.grad is None and model.fc.weight.grad is not None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_a_tensor_reached_only_through_zero_gradient_ops_gets_zeros_not_none(wrap):
    """Eager's grad is None only where the autograd graph has no path (detach, an integer cast);
    through floor, round, sign or x ** 0 the path exists and the gradient is zeros."""
    class Paths(nn.Module):
        def __init__(self):
            super().__init__()
            self.floored, self.rounded, self.detached, self.counted = (nn.Parameter(torch.randn(3)) for _ in range(4))
            self.powered = nn.Parameter(torch.randn(3))

        def forward(self, x):
            return (x * torch.floor(self.floored) + torch.round(self.rounded).sign() + self.powered ** 0
                    + self.detached.detach() + self.counted.long()).sum()

    torch.manual_seed(0)
    eager = Paths()
    model = wrap(Paths())
    model.load_state_dict(eager.state_dict())
    x = torch.randn(4, 3, requires_grad=True)
    eager(x).backward()
    model(x.detach().requires_grad_()).backward()
    assert model.fallback_reason is None
    for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
        if pe.grad is None:
            assert pm.grad is None, name
        else:
            assert pm.grad is not None and torch.equal(pm.grad, pe.grad), name
    assert eager.detached.grad is None and eager.counted.grad is None and eager.rounded.grad is not None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_a_module_whose_outputs_are_all_integers_runs_in_training_mode(wrap):
    """Predictions as class ids (argmax) and top-k indices in training mode with grad enabled:
    nothing to differentiate, so the outputs need no grad and the parameters keep grad None."""
    class Predict(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 5)

        def forward(self, x):
            logits = self.fc(x)
            return logits.argmax(-1), logits.topk(2).indices

    torch.manual_seed(0)
    eager = Predict()
    model = wrap(Predict())
    model.load_state_dict(eager.state_dict())
    x = torch.randn(4, 3)
    for got, want in zip(model(x), eager(x)):
        assert torch.equal(got, want) and not got.requires_grad
    assert model.fallback_reason is None and model.fc.weight.grad is None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_in_place_change_of_an_output_the_backward_reads_raises_eagers_error(wrap):
    model = wrap(_tanh_mlp())
    out = model(torch.randn(5, 3))  # Tanh's gradient reads its output
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    assert model.fallback_reason is None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_in_place_change_of_an_output_the_backward_does_not_read_is_eagers_gradient(wrap):
    torch.manual_seed(0)
    eager = nn.Linear(3, 2)
    model = wrap(nn.Linear(3, 2))
    model.load_state_dict(eager.state_dict())
    x = torch.randn(5, 3)
    for m in (eager, model):
        out = m(x)
        out.mul_(2)  # Linear's backward reads x and W, not its output
        out.pow(2).sum().backward()
    torch.testing.assert_close(model.weight.grad, eager.weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_in_place_change_of_a_saved_parameter_raises_eagers_error(wrap):
    model = wrap(nn.Linear(3, 2))
    x = torch.randn(5, 3, requires_grad=True)  # dX = dY W reads W
    out = model(x)
    with torch.no_grad():
        model.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_retain_graph_gives_the_same_gradient_again(wrap):
    eager, model = _tanh_mlp(), wrap(_tanh_mlp())
    x = torch.randn(5, 3)
    for m in (eager, model):
        loss = m(x).pow(2).sum()
        loss.backward(retain_graph=True)
        loss.backward(retain_graph=True)
        loss.backward()  # the third frees the graph
    for pe, pm in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6)
    assert model.fallback_reason is None


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_a_second_backward_without_retain_graph_raises_eagers_error(wrap):
    for module in (_tanh_mlp(), nn.Linear(3, 2)):  # Linear saves only its input and weight
        model = wrap(module)
        loss = model(torch.randn(5, 3)).sum()
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_autograd_grad_returns_the_gradients_and_leaves_param_grad_alone(wrap):
    eager, model = _tanh_mlp(), wrap(_tanh_mlp())
    x = torch.randn(5, 3)
    expected = torch.autograd.grad(eager(x).pow(2).sum(), list(eager.parameters()))
    got = torch.autograd.grad(model(x).pow(2).sum(), list(model.parameters()))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())
    assert model.fallback_reason is None


def test_autograd_grad_does_not_step_a_step_in_backward_optimizer():
    model = trainrt.RTModule(_tanh_mlp())
    trainrt.optim.FusedAdam(model.parameters(), lr=0.1, step_in_backward=True)
    before = [p.detach().clone() for p in model.parameters()]
    grads = torch.autograd.grad(model(torch.randn(5, 3)).sum(), list(model.parameters()))
    assert all(g is not None for g in grads)
    for p, b in zip(model.parameters(), before):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_hooks_on_outputs_and_parameters_fire_as_in_eager(wrap):
    eager, model = _tanh_mlp(), wrap(_tanh_mlp())
    x = torch.randn(5, 3)
    seen = {}
    for tag, m in (("eager", eager), ("engine", model)):
        weight = m[0].weight if tag == "eager" else model._module[0].weight
        weight.register_hook(lambda g, tag=tag: seen.update({f"{tag} weight": g.clone()}))
        weight.register_post_accumulate_grad_hook(lambda p, tag=tag: seen.update({f"{tag} accumulated": True}))
        out = m(x)
        out.register_hook(lambda g, tag=tag: seen.update({f"{tag} output": g.clone()}) or g * 3)  # scales dY
        out.pow(2).sum().backward()
    torch.testing.assert_close(seen["engine output"], seen["eager output"])
    torch.testing.assert_close(seen["engine weight"], seen["eager weight"], rtol=1e-5, atol=1e-6)
    assert seen["engine accumulated"] and seen["eager accumulated"]
    torch.testing.assert_close(model._module[0].weight.grad, eager[0].weight.grad, rtol=1e-5, atol=1e-6)
