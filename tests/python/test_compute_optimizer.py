"""TRAINRT_ENABLE_COMPUTE_OPTIMIZER (ORTMODULE_ENABLE_COMPUTE_OPTIMIZER): the engine's graph rewrites on or off."""

import copy

import pytest
import torch
import torch.nn as nn

import trainrt


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def test_compute_optimizer_switch_turns_the_fusions_off_and_results_stay_the_same(monkeypatch, tmp_path):
    """ORTMODULE_ENABLE_COMPUTE_OPTIMIZER=0: the optimized forward keeps the captured MatMul + Add."""
    import onnx

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):  # 3-D input: FusedMatMul + Add, the pattern the bias fusion folds
            return torch.relu(self.lin(x)).sum()

    torch.manual_seed(0)
    plain, x = Block(), torch.randn(2, 5, 4)
    bias_adds, results = {}, {}
    for flag in ("1", "0"):
        monkeypatch.setenv("ORTMODULE_ENABLE_COMPUTE_OPTIMIZER", flag)
        model = trainrt.RTModule(copy.deepcopy(plain), trainrt.DebugOptions(save_onnx=True, save_path=str(tmp_path / flag)))
        loss = model(x)
        loss.backward()
        assert model.fallback_reason is None
        forward = onnx.load(str(tmp_path / flag / "trainrt_optimized_forward.onnx"))
        bias_adds[flag] = sum(n.op_type == "Add" for n in forward.graph.node)
        results[flag] = (loss.detach(), model.lin.weight.grad.clone())
    assert bias_adds["0"] == bias_adds["1"] + 1
    for a, b in zip(results["0"], results["1"]):
        torch.testing.assert_close(a, b)


def test_repeated_computation_runs_once_and_its_gradient_adds_both_uses():
    """CommonSubexpressionElimination: the same product and tanh computed twice in the forward become
    one node each; the gradient of the merged node carries both readers' gradients, as torch's two do."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 5))

        def forward(self, x):
            a = torch.tanh(x @ self.w)
            b = torch.tanh(x @ self.w)  # the same again: merged
            c = torch.sigmoid(x @ self.w)  # another op on the same product: its tanh is not merged
            return (a * b + c).sum()

    torch.manual_seed(0)
    eager, x = Twice(), torch.randn(3, 4, 6, requires_grad=True)
    model = trainrt.RTModule(copy.deepcopy(eager))
    x_rt = x.detach().clone().requires_grad_()
    loss = model(x_rt)
    loss.backward()
    assert model.fallback_reason is None
    want = eager(x)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(model.w.grad, eager.w.grad)
    torch.testing.assert_close(x_rt.grad, x.grad)
    report = {r["pass"]: r for r in model.engines[0].programs.forward_pass_report}
    # The second product and its tanh, and the third product (the sigmoid then reads the first).
    assert report["CommonSubexpressionElimination"]["nodes_removed"] >= 3, report
