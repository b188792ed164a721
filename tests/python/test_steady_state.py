"""The steady-state fast path (a call like the last one reuses its engine without the general
schema work) changes no result: every change of mode, grad mode, dtype, shape, requires_grad or
structure still finds the engine it needs; and a graph without random ops draws no random numbers."""

import pytest
import torch
import torch.nn as nn

import trainrt


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, scale=None):
        y = self.drop(torch.tanh(self.fc(x)))
        return y if scale is None else y * scale


def test_each_change_after_a_repeated_call_gets_eagers_result():
    torch.manual_seed(0)
    eager = Net()
    model = trainrt.RTModule(Net())
    model.load_state_dict(eager.state_dict())
    eager.eval(), model.eval()  # no dropout: outputs comparable call by call
    x = torch.randn(5, 4)
    calls = [((x,), {}), ((x,), {}),                          # the second takes the fast path
             ((torch.randn(7, 4),), {}),                      # another batch size
             ((x.clone().requires_grad_(),), {}),             # an input that requires grad
             ((x,), {"scale": torch.full((3,), 2.0)}),        # a keyword tensor
             ((x,), {"scale": 3.0}),                          # a non-tensor argument: the general path
             ((x,), {})]
    for args, kwargs in calls:
        torch.testing.assert_close(model(*args, **kwargs), eager(*args, **kwargs))
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x))
    model.train()
    out = model(x)  # training mode: dropout zeroes about half, where eval mode zeroes none
    assert (out == 0).any() and model.fallback_reason is None


def test_gradients_stay_right_across_repeated_calls():
    torch.manual_seed(0)
    eager, model = nn.Linear(4, 3), trainrt.RTModule(nn.Linear(4, 3))
    model.load_state_dict(eager.state_dict())
    for _ in range(3):
        x = torch.randn(5, 4)
        for m in (eager, model):
            m.zero_grad()
            m(x).pow(2).sum().backward()
        torch.testing.assert_close(model.weight.grad, eager.weight.grad, rtol=1e-5, atol=1e-6)


def test_a_graph_without_random_ops_leaves_torchs_generator_alone():
    model = trainrt.RTModule(nn.Linear(4, 3))
    x = torch.randn(5, 4)
    model(x).sum().backward()
    state = torch.get_rng_state()
    model(x).sum().backward()
    assert torch.equal(torch.get_rng_state(), state)


def test_a_graph_with_dropout_is_reproduced_by_manual_seed():
    model = trainrt.RTModule(Net())
    x = torch.randn(6, 4)
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs.append(model(x))
    torch.testing.assert_close(outs[0], outs[1])
    assert not torch.equal(model(x), outs[1])  # a fresh seed per call
