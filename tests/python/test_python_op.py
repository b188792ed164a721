"""User torch.autograd.Functions run in the engine as PythonOp with their own backward: parity with
eager (losses and gradients within 1e-5 relative, step after step), ctx features, errors. Fallback
is disabled and each test checks the graph holds the PythonOp (the engine ran it, the forward was
not traced through)."""

import threading

import pytest
import torch
import torch.nn as nn

import trainrt
from trainrt.ortmodule import ORTModule

WRAPPERS = [trainrt.RTModule, ORTModule]


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha: float):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class ScaledSum(torch.autograd.Function):
    """Scalar and tuple arguments; saves an input; a backward returning None for some inputs."""

    @staticmethod
    def forward(ctx, x, y, scale: float, dims: tuple, flag: bool):
        ctx.save_for_backward(x, y)
        ctx.scale, ctx.flag = scale, flag
        return (x * y * scale).sum(dim=dims, keepdim=True) if flag else x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        gx = g * y * ctx.scale if ctx.flag else g * y
        return gx, None, None, None, None  # no gradient for y, even though it requires one


class MaxWithIndex(torch.autograd.Function):
    """Two outputs, one an integer index marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=-1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values, index

    @staticmethod
    def backward(ctx, g_values, g_index):
        (index,) = ctx.saved_tensors
        grad = torch.zeros(ctx.shape, dtype=g_values.dtype)
        return grad.scatter(-1, index.unsqueeze(-1), g_values.unsqueeze(-1))


class InPlaceDouble(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class Outer(torch.autograd.Function):
    """Calls another Function in its forward and backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return StraightThrough.apply(x) * 2 + x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return GradientReversal.apply(g, -3.0) + torch.cos(x) * 0  # 3 g, through the inner Function


class Cube(torch.autograd.Function):
    """New-style: forward without ctx, setup_context; once_differentiable; an op the engine lacks."""

    @staticmethod
    def forward(x):
        return torch.special.erfcx(x) * 0 + 0.1 * x ** 3  # erfcx has no translation: the forward is Python

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 0.3 * x * x * g


def _scope():
    class StraightThrough(torch.autograd.Function):  # same name as the module's, other behaviour
        @staticmethod
        def forward(ctx, x):
            return torch.round(x)

        @staticmethod
        def backward(ctx, g):
            return 10 * g

    return StraightThrough


LocalStraightThrough = _scope()


class SavesItsView(torch.autograd.Function):
    """Saves its output, a view of its input: the engine must not reuse that input's memory."""

    @staticmethod
    def forward(ctx, x):
        y = x.view_as(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y


class Net(nn.Module):
    """Two Linears around `body(h)`."""

    def __init__(self, body, width=6):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, width), nn.Linear(width, 3)
        self.body = body

    def forward(self, x):
        return self.fc2(self.body(torch.tanh(self.fc1(x)) * 3))


CASES = {
    "straight_through": lambda h: StraightThrough.apply(h),
    "gradient_reversal": lambda h: GradientReversal.apply(h, 0.25),
    "scalar_and_tuple_args": lambda h: ScaledSum.apply(h, h * 0.5 + 1, 0.5, (1,), True) + h,
    "max_with_index": lambda h: torch.cat([MaxWithIndex.apply(h)[0].unsqueeze(-1)] * h.shape[-1], -1)
    + MaxWithIndex.apply(h)[1].unsqueeze(-1).float(),
    "two_same_named": lambda h: StraightThrough.apply(h) + LocalStraightThrough.apply(h),
    "mark_dirty": lambda h: InPlaceDouble.apply(h * 1.0),
    "none_grads": lambda h: ScaledSum.apply(h, torch.sigmoid(h), 1.0, (0,), False),
    "nested": lambda h: Outer.apply(h),
    "engine_lacks_op": lambda h: Cube.apply(h),
    "saves_its_view": lambda h: torch.tanh(torch.relu(SavesItsView.apply(h)) * 3 + 1) * 2,
}


class Body(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, h):
        return self.fn(h)


def _pair(case, wrap):
    torch.manual_seed(0)
    eager = Net(Body(CASES[case]))
    model = wrap(Net(Body(CASES[case])))
    model.load_state_dict(eager.state_dict())
    return eager, model


@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("case", list(CASES))
def test_function_parity_with_eager_over_steps(case, wrap):
    eager, model = _pair(case, wrap)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_m = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(3):
        x = torch.randn(5, 4)
        losses = []
        for m, opt in ((eager, opt_e), (model, opt_m)):
            opt.zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
            torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=f"step {step} {name}")
        opt_e.step()
        opt_m.step()
        assert model.fallback_reason is None
    ops = [n for e in model.engines for n in e.captured.model.graph.node if n.op_type == "PythonOp"]
    assert ops, "the Function was traced through, not kept as a PythonOp"


class TakesEverything(torch.autograd.Function):
    """Non-tensor arguments of every kind the node's `arguments` attribute writes."""

    @staticmethod
    def forward(ctx, x, alpha, dims, flag, nothing, mode, pair, options, limit, dtype, scales):
        ctx.alpha = alpha
        return x * alpha

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.alpha,) + (None,) * 10


def test_non_tensor_arguments_are_the_nodes_arguments_attribute():
    import json

    def body(h):
        return TakesEverything.apply(h, 0.5, (1, 2), True, None, "fast", [3, 4.5], {"k": 1}, float("inf"),
                                     torch.float32, [h, h])

    model = trainrt.RTModule(Net(Body(body)))
    model(torch.randn(2, 4)).sum().backward()
    node = next(n for n in model.engines[0].captured.model.graph.node if n.op_type == "PythonOp")
    arguments = json.loads(next(a.s for a in node.attribute if a.name == "arguments"))
    assert arguments == [{"tensor": 0}, 0.5, {"tuple": [1, 2]}, True, None, "fast", [3, 4.5],
                         {"dict": [["k", 1]]}, {"float": "inf"}, {"object": "torch.dtype"},
                         [{"tensor": 1}, {"tensor": 2}]]
    assert model.fallback_reason is None


def test_same_named_functions_are_told_apart_by_full_name():
    _, model = _pair("two_same_named", trainrt.RTModule)
    model(torch.randn(2, 4))
    names = [next(a.s for a in n.attribute if a.name == "function").decode()
             for n in model.engines[0].captured.model.graph.node if n.op_type == "PythonOp"]
    assert names == [f"{__name__}.StraightThrough", f"{__name__}._scope.<locals>.StraightThrough"]


def test_symbolic_batch_flows_through_the_node_without_recapture():
    _, model = _pair("gradient_reversal", trainrt.RTModule)
    for batch in (3, 7, 11):
        model(torch.randn(batch, 4)).sum().backward()
    assert model.num_captures == 1


def test_eval_and_no_grad_run_the_forward_only():
    eager, model = _pair("straight_through", trainrt.RTModule)
    x = torch.randn(4, 4)
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x))
    assert model.fallback_reason is None


def test_retain_graph_runs_the_users_backward_twice():
    eager, model = _pair("gradient_reversal", trainrt.RTModule)
    x = torch.randn(5, 4)
    for m in (eager, model):
        loss = m(x).pow(2).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    for pe, pm in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6)


class Raises(torch.autograd.Function):
    fail_in = None

    @staticmethod
    def forward(ctx, x):
        if Raises.fail_in == "forward" and not isinstance(x, torch._subclasses.FakeTensor):
            raise ValueError("user forward failed")
        return x * 2

    @staticmethod
    def backward(ctx, g):
        if Raises.fail_in == "backward":
            raise KeyError("user backward failed")
        return g * 2


class WrongShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g[:1]


@pytest.mark.parametrize("where,kind", [("forward", ValueError), ("backward", KeyError)])
def test_an_exception_in_the_users_code_reaches_the_caller_and_the_engine_stays_usable(where, kind, monkeypatch):
    model = trainrt.RTModule(Net(Body(lambda h: Raises.apply(h))))
    x = torch.randn(3, 4)
    model(x).sum().backward()  # captured with the good path
    monkeypatch.setattr(Raises, "fail_in", where)
    with pytest.raises(kind, match=f"user {where} failed"):
        model(x).sum().backward()
    monkeypatch.setattr(Raises, "fail_in", None)
    model.zero_grad()
    model(x).sum().backward()
    assert model.fc1.weight.grad is not None and model.fallback_reason is None


class MeetsTheOtherThread(torch.autograd.Function):
    """Waits in its forward until the other thread's engine call is inside its own forward too; the
    thread named `fail_on` then raises."""

    barrier, fail_on = None, None

    @staticmethod
    def forward(ctx, x):
        if not isinstance(x, torch._subclasses.FakeTensor) and MeetsTheOtherThread.barrier is not None:
            MeetsTheOtherThread.barrier.wait(timeout=30)
            if threading.current_thread().name == MeetsTheOtherThread.fail_on:
                raise ValueError("user forward failed on this thread")
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_engine_calls_on_two_threads_at_once_keep_their_own_records_and_errors(monkeypatch):
    """Two replicas called from two threads, both inside an engine forward at the same moment: the one
    whose Function raises gets its own exception, the other trains as eager."""
    torch.manual_seed(0)
    eager = Net(Body(lambda h: MeetsTheOtherThread.apply(h)))
    replicas = [trainrt.RTModule(Net(Body(lambda h: MeetsTheOtherThread.apply(h)))) for _ in range(2)]
    x = torch.randn(3, 4)
    for r in replicas:
        r.load_state_dict(eager.state_dict())
        r(x)  # captured on this thread, before the barrier is set
    eager(x).pow(2).sum().backward()
    monkeypatch.setattr(MeetsTheOtherThread, "barrier", threading.Barrier(2))
    monkeypatch.setattr(MeetsTheOtherThread, "fail_on", "replica0")
    outcome = {}

    def step(i):
        try:
            replicas[i](x).pow(2).sum().backward()
            outcome[i] = "trained"
        except ValueError as err:
            outcome[i] = str(err)

    threads = [threading.Thread(target=step, args=(i,), name=f"replica{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcome == {0: "user forward failed on this thread", 1: "trained"}
    for (name, pe), (_, pm) in zip(eager.named_parameters(), replicas[1].named_parameters()):
        torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert all(r.fallback_reason is None for r in replicas)


def test_a_backward_returning_a_wrong_shape_names_the_function():
    model = trainrt.RTModule(Net(Body(lambda h: WrongShape.apply(h))))
    with pytest.raises(RuntimeError, match="WrongShape"):
        model(torch.randn(3, 4)).sum().backward()


class BroadcastGrad(torch.autograd.Function):
    """A backward whose gradient is broadcast (an extra leading dim) and of another dtype: autograd
    sums it back to the input's shape and casts it to the input's dtype."""

    @staticmethod
    def forward(ctx, x, scale: float):
        ctx.scale = scale
        return x * scale

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.scale).double().expand(2, *g.shape) / 2, None


def test_a_broadcast_gradient_of_another_dtype_is_summed_and_cast_as_eager():
    torch.manual_seed(0)
    eager = Net(Body(lambda h: BroadcastGrad.apply(h, 3.0)))
    model = trainrt.RTModule(Net(Body(lambda h: BroadcastGrad.apply(h, 3.0))))
    model.load_state_dict(eager.state_dict())
    x = torch.randn(5, 4)
    for m in (eager, model):
        m(x).pow(2).sum().backward()
    for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert _python_ops(model) and model.fallback_reason is None


def test_the_users_backward_is_called_on_its_ctx_without_autograd_grad(monkeypatch):
    """Where every output gets a gradient, PythonOpGrad calls the Function's backward on its ctx
    directly (autograd.grad costs ~25 µs a call); None gradients take autograd's path (above)."""
    eager, model = _pair("gradient_reversal", trainrt.RTModule)
    x = torch.randn(5, 4)
    eager(x).pow(2).sum().backward()

    def refuse(*args, **kwargs):
        raise AssertionError("torch.autograd.grad called")

    monkeypatch.setattr(torch.autograd, "grad", refuse)
    model(x).pow(2).sum().backward()
    for pe, pm in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6)


class TooFewGrads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale: float):
        return x * scale

    @staticmethod
    def backward(ctx, g):
        return g


class GradForAFloat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale: float):
        return x * scale

    @staticmethod
    def backward(ctx, g):
        return g, g


@pytest.mark.parametrize("function,match", [(TooFewGrads, "incorrect number of gradients"),
                                            (GradForAFloat, "not a tensor")])
def test_a_backward_returning_what_autograd_refuses_raises_as_eager(function, match):
    x = torch.randn(3, 4)
    eager = Net(Body(lambda h: function.apply(h, 2.0)))
    with pytest.raises(RuntimeError):
        eager(x).sum().backward()
    model = trainrt.RTModule(Net(Body(lambda h: function.apply(h, 2.0))))
    with pytest.raises(RuntimeError, match=f"{function.__name__}.*{match}"):
        model(x).sum().backward()
    assert _python_ops(model)


class MixListed(torch.autograd.Function):
    """Tensors inside a list argument: inputs of the forward, not of the Function's autograd (eager
    gives them no gradient). A keyword argument: bound to its position, as torch does; its
    gradient is broadcast (autograd sums it)."""

    @staticmethod
    def forward(ctx, x, pair, shift):
        ctx.save_for_backward(pair[0])
        return x * pair[0] + pair[1] + shift

    @staticmethod
    def backward(ctx, g):
        scale, = ctx.saved_tensors
        return g * scale, None, g


class Scaled(torch.autograd.Function):
    """New style, with a default and a keyword argument (torch binds them as positional)."""

    @staticmethod
    def forward(x, scale=2.0, offset=0.0):
        return x * scale + offset

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None, None


class ListedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.rand(4) + 0.5)   # read only inside the list: grad None, as in eager
        self.shift = nn.Parameter(torch.randn(4))

    def forward(self, x):
        h = self.fc(x)
        h = MixListed.apply(h, [self.scale, h * 0.5], shift=self.shift)
        return Scaled.apply(h, offset=1.0) + Scaled.apply(h)


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_tensors_in_lists_and_keyword_arguments_run_as_eager(wrap):
    torch.manual_seed(0)
    eager, model = ListedNet(), wrap(ListedNet())
    model.load_state_dict(eager.state_dict())
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_m = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(3):
        x = torch.randn(5, 4)
        for m, opt in ((eager, opt_e), (model, opt_m)):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
        for (name, pe), (_, pm) in zip(eager.named_parameters(), model.named_parameters()):
            if pe.grad is None:
                assert pm.grad is None, f"step {step} {name}: eager has no gradient"
            else:
                torch.testing.assert_close(pm.grad, pe.grad, rtol=1e-5, atol=1e-6, msg=f"step {step} {name}")
        opt_e.step()
        opt_m.step()
    assert eager.scale.grad is None and eager.shift.grad is not None  # what the test relies on
    assert len(_python_ops(model)) == 3 and model.fallback_reason is None


def test_skipped_functions_are_traced_through(monkeypatch):
    monkeypatch.setenv("TRAINRT_SKIPPED_AUTOGRAD_FUNCTIONS", f"{__name__}.GradientReversal")
    _, model = _pair("gradient_reversal", trainrt.RTModule)
    model(torch.randn(2, 4)).sum().backward()
    assert not [n for n in model.engines[0].captured.model.graph.node if n.op_type == "PythonOp"]


def _python_ops(model) -> list:
    return [n for e in model.engines for n in e.captured.model.graph.node if n.op_type == "PythonOp"]


def test_custom_autograd_off_traces_and_warns(monkeypatch, trainrt_log):
    from trainrt.capture import autograd_function

    monkeypatch.setattr(autograd_function, "_warned_inlined", False)  # once per process
    monkeypatch.setenv("ORTMODULE_ENABLE_CUSTOM_AUTOGRAD", "0")
    eager, model = _pair("gradient_reversal", trainrt.RTModule)
    x = torch.randn(2, 4)
    for m in (eager, model):
        m(x).sum().backward()
    assert not _python_ops(model)
    assert "custom autograd.Function support is off" in trainrt_log.text and "GradientReversal" in trainrt_log.text
    # The traced forward is a view: its derived gradient is +1, not the user's -alpha.
    assert not torch.allclose(model.fc1.weight.grad, eager.fc1.weight.grad)


def test_enable_custom_autograd_support_applies_to_modules_made_afterwards(monkeypatch):
    from trainrt import options

    monkeypatch.setattr(options, "_custom_autograd_default", True)
    trainrt.enable_custom_autograd_support(False)
    _, traced = _pair("gradient_reversal", trainrt.RTModule)
    trainrt.enable_custom_autograd_support(True)
    _, opaque = _pair("gradient_reversal", trainrt.RTModule)
    for m in (traced, opaque):
        m(torch.randn(2, 4)).sum().backward()
    assert not _python_ops(traced) and _python_ops(opaque)


def test_the_export_cache_keeps_traced_and_opaque_captures_apart(monkeypatch, tmp_path):
    """A graph captured with custom autograd off (the Function traced, stored) must not serve a
    process that wants the user's backward."""
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRAINRT_ENABLE_CUSTOM_AUTOGRAD", "0")
    eager, traced = _pair("gradient_reversal", trainrt.RTModule)
    traced(torch.randn(2, 4)).sum().backward()
    assert len(list((tmp_path / "cache").iterdir())) == 1
    monkeypatch.setenv("TRAINRT_ENABLE_CUSTOM_AUTOGRAD", "1")
    _, opaque = _pair("gradient_reversal", trainrt.RTModule)
    opaque(torch.randn(2, 4)).sum().backward()
    assert _python_ops(opaque)


def test_registered_shape_inference_replaces_the_fake_run():
    class NoFake(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if isinstance(x, torch._subclasses.FakeTensor):
                raise AssertionError("the forward ran on FakeTensors")
            return x + 1

        @staticmethod
        def backward(ctx, g):
            return g

    trainrt.register_shape_inference(NoFake, lambda x: [(x.shape, x.dtype)])
    torch.manual_seed(0)
    model = trainrt.RTModule(Net(Body(lambda h: NoFake.apply(h))))
    model(torch.randn(3, 4)).sum().backward()
    assert model.fallback_reason is None and model.fc1.weight.grad is not None
