"""torch.cond in a module (capture/translator.py `_cond`): captured as one ONNX If whose branches
read the operands from the enclosing graph, run by the engine whichever branch a batch takes (no
second capture), and differentiated through the taken branch (autodiff/control_flow_gradients.cc).
Fallback is disabled: every result here is the engine's, compared with eager step after step."""

import copy

import pytest
import torch
from torch import nn

import trainrt


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Gated(nn.Module):
    """A shared Linear, then one of two heads: `scale` is read by one branch only, `gate` by the other."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.scale = nn.Parameter(torch.tensor(1.5))
        self.gate = nn.Linear(6, 6)

    def forward(self, x, target):  # x (B, 4), target (B, 6)
        h = self.lin(x)

        def positive(h):
            return h.relu() * self.scale, h.sum(-1)

        def other(h):
            return torch.sigmoid(self.gate(h)) * h, -h.sum(-1)

        y, aux = torch.cond(x.sum() > 0, positive, other, (h,))
        return nn.functional.mse_loss(y, target) + aux.mean() * 0.1


def batches():
    g = torch.Generator().manual_seed(0)
    for batch, sign in ((4, 1), (4, -1), (6, 1), (3, -1), (4, -1), (5, 1)):
        yield sign * torch.rand(batch, 4, generator=g) + 0.01 * sign, torch.randn(batch, 6, generator=g)


def test_cond_trains_in_the_engine_as_eager_on_both_branches():
    torch.manual_seed(0)
    eager = Gated()
    rt = trainrt.RTModule(copy.deepcopy(eager))
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_rt = torch.optim.SGD(rt.parameters(), lr=0.05, momentum=0.9)
    for x, target in batches():
        expected = eager(x, target)
        loss = rt(x, target)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
        expected.backward()
        loss.backward()
        for (name, p), q in zip(eager.named_parameters(), rt.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
        opt_eager.step()
        opt_rt.step()
        opt_eager.zero_grad()
        opt_rt.zero_grad()
    for (name, p), q in zip(eager.named_parameters(), rt.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
    (engine,) = rt.engines  # one capture serves both branches and every batch size
    assert rt._fallback_reason is None
    ops = [n.op_type for n in engine.captured.model.graph.node]
    assert ops.count("If") == 1


def test_a_cond_on_a_size_is_computed_from_the_input_shapes():
    """A condition on a dynamic size is a Python bool in eager: the capture keeps the branch its
    example takes and checks the condition every call (a size that takes the other branch gets a
    capture of its own), so a parameter only the other branch reads keeps grad None, as in eager."""

    class OnSize(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):  # x (B, 4, T)
            return torch.cond(x.shape[2] > 2, lambda x: self.lin(x.mT).relu(), lambda x: (x.mT * self.lin.bias).contiguous(), (x,)).sum()

    torch.manual_seed(0)
    eager = OnSize()
    rt = trainrt.RTModule(copy.deepcopy(eager))
    for t in (3, 2, 5, 1, 2, 4):
        x = torch.randn(3, 4, t)
        loss, expected = rt(x), eager(x)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(rt.lin.weight.grad, eager.lin.weight.grad)
        rt.zero_grad()
        eager.zero_grad()
    assert rt._fallback_reason is None
    assert len(rt.engines) == 3  # t > 2, t == 2 (the other branch) and t == 1 (export specializes 1)
