"""Gradients leave the engine as they become final (trainrt/gradient_handoff.py): the same bits as
the gradients returned at the end, hooks that see them during the engine's backward, eager's
accumulation and autograd.grad semantics, and a hook's exception reaching the caller."""

import pytest
import torch

import trainrt


@pytest.fixture(autouse=True)
def _engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                               torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def _wrapped(monkeypatch, mode: str, seed=0):
    monkeypatch.setenv("TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT", mode)
    return trainrt.RTModule(_mlp(seed))


def _batches(n=3):
    torch.manual_seed(1)
    return [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(n)]


def _train(model, steps, accumulate=1):
    """SGD with momentum; `accumulate` backwards per step. Returns losses and each step's grads."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    for x, y in steps:
        for _ in range(accumulate):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.item())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads


@pytest.mark.parametrize("accumulate", [1, 2])
def test_handed_over_gradients_are_bit_identical_to_returned_ones(monkeypatch, accumulate):
    handed, returned = _wrapped(monkeypatch, "1"), _wrapped(monkeypatch, "0")
    steps = _batches()
    losses_h, grads_h = _train(handed, steps, accumulate)
    losses_r, grads_r = _train(returned, steps, accumulate)
    assert handed.fallback_reason is None and returned.fallback_reason is None
    assert losses_h == losses_r
    for gh, gr in zip(grads_h, grads_r):
        for a, b in zip(gh, gr):
            assert torch.equal(a, b)
    eager_losses, _ = _train(_mlp(), steps, accumulate)
    torch.testing.assert_close(torch.tensor(losses_h), torch.tensor(eager_losses), rtol=1e-5, atol=1e-6)


def test_handed_over_gradients_become_param_grad_without_a_copy(monkeypatch):
    """AccumulateGrad steals a handed-over gradient (its storage becomes param.grad), as it steals the
    ones returned at the end: torch allocates nothing more in the backward than without the hand-over."""
    from trainrt.bench.tensor_memory import peak_bytes_during

    x, y = _batches(1)[0]
    torch_bytes = {}
    for mode in ("1", "0"):
        model = _wrapped(monkeypatch, mode)
        for _ in range(2):  # the second backward: the engine's storage planned and kept
            loss = torch.nn.functional.cross_entropy(model(x), y)
            torch_bytes[mode], _ = peak_bytes_during(loss.backward)
            model.zero_grad(set_to_none=True)
    grad_bytes = 4 * sum(p.numel() for p in _mlp().parameters())
    assert torch_bytes["1"] == torch_bytes["0"] < grad_bytes / 4, torch_bytes


def test_parameter_hooks_run_during_the_engine_backward(monkeypatch):
    """Each parameter's hook fires before the engine's backward returns: the input's gradient, which
    the engine returns at its end, comes after all of them. Without hand-over it comes first."""
    for mode, params_first in (("1", True), ("0", False)):
        model = _wrapped(monkeypatch, mode)
        events = []
        for name, p in model.named_parameters():
            p.register_hook(lambda g, name=name: events.append(name))
        x = torch.randn(8, 16, requires_grad=True)
        x.register_hook(lambda g: events.append("input"))
        model(x).sum().backward()
        assert model.fallback_reason is None
        assert len(events) == 1 + len(list(model.parameters()))
        assert (events[-1] == "input") == params_first, (mode, events)


def test_hooks_see_no_python_object_in_the_thread_state_and_the_outer_one_comes_back(monkeypatch):
    """What DDP and ZeRO launch from a hook copies the thread's state; a Python object in it (the
    contextvars copy torch.autograd.backward stashes) would be freed by gloo's thread, which aborts
    the process if that happens while the interpreter shuts down. The caller's stash is restored."""
    model = _wrapped(monkeypatch, "1")
    seen, outer = [], []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: seen.append(torch._C._is_key_in_tls("context")))
    x = torch.randn(8, 16, requires_grad=True)
    x.register_hook(lambda g: outer.append(torch._C._is_key_in_tls("context")))  # after every hand-over
    model(x).sum().backward()
    assert model.fallback_reason is None
    assert len(seen) == len(list(model.parameters())) and not any(seen), seen
    assert outer == [True]  # the outer backward's own stash is back once the hand-over is done


def test_default_hands_over_when_a_parameter_has_a_post_accumulate_hook(monkeypatch):
    monkeypatch.delenv("TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT", raising=False)
    model = trainrt.RTModule(_mlp())
    events = []
    last = list(model.parameters())[-1]
    last.register_post_accumulate_grad_hook(lambda p: events.append(("param", p.grad.clone())))
    x = torch.randn(8, 16, requires_grad=True)
    x.register_hook(lambda g: events.append(("input", None)))
    model(x).sum().backward()
    assert [kind for kind, _ in events] == ["param", "input"]
    torch.testing.assert_close(events[0][1], last.grad)


def test_autograd_grad_of_an_input_leaves_parameters_alone(monkeypatch):
    model = _wrapped(monkeypatch, "1")
    x, y = _batches(1)[0]
    x.requires_grad_(True)
    (gx,) = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x), y), [x])
    assert all(p.grad is None for p in model.parameters())
    reference = _mlp()
    (expected,) = torch.autograd.grad(torch.nn.functional.cross_entropy(reference(x), y), [x])
    torch.testing.assert_close(gx, expected, rtol=1e-5, atol=1e-6)


def test_autograd_grad_of_parameters_is_refused_while_handing_over_and_works_without(monkeypatch):
    """Handed-over parameters are not autograd inputs of the engine call (gradient_handoff.py says
    why): torch.autograd.grad names them unused. The default hands over only when watched."""
    x, y = _batches(1)[0]
    with pytest.raises(RuntimeError, match="not have been used in the graph"):
        model = _wrapped(monkeypatch, "1")
        torch.autograd.grad(torch.nn.functional.cross_entropy(model(x), y), list(model.parameters()))
    monkeypatch.delenv("TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT")
    model = trainrt.RTModule(_mlp())
    grads = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x), y), list(model.parameters()))
    reference = _mlp()
    expected = torch.autograd.grad(torch.nn.functional.cross_entropy(reference(x), y), list(reference.parameters()))
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_backward_with_inputs_naming_an_input_leaves_parameters_alone(monkeypatch):
    model = _wrapped(monkeypatch, "1")
    x, y = _batches(1)[0]
    x.requires_grad_(True)
    torch.nn.functional.cross_entropy(model(x), y).backward(inputs=[x])
    assert x.grad is not None
    assert all(p.grad is None for p in model.parameters())


def test_a_hooks_exception_reaches_the_caller_and_the_engine_stays_usable(monkeypatch):
    model = _wrapped(monkeypatch, "1")
    x, y = _batches(1)[0]
    first = list(model.parameters())[0]

    def refuse(g):
        raise ValueError("hook refused this gradient")

    handle = first.register_hook(refuse)
    with pytest.raises(ValueError, match="hook refused"):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    handle.remove()
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert all(p.grad is not None for p in model.parameters())
