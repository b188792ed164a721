"""A Python `assert` on tensor values is a runtime assert while capturing (capture/python_asserts.py):
ProphetNet's `assert torch.all(ids >= 0).item(), "..."` and I-BERT's `assert a.isnan().sum() == 0 and
b.isnan().sum() == 0, "..."` export, the asserts are dropped, and the model trains in the engine as in
eager (fallback disabled). A data-dependent `if`, or an `assert a or b`'s `a`, is a branch on data,
captured per branch and checked on every call (branch_checks.py).

PYTEST_DONT_REWRITE: the modules' asserts must keep Python's own bytecode, which pytest's assertion
rewriting would replace.
"""

import copy
import dis

import pytest
import torch
from torch import nn

import trainrt
from trainrt.capture import CaptureError, capture
from trainrt.capture.python_asserts import false_path_raises_assertion


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


class AssertingHead(nn.Module):
    """A classifier whose forward asserts on its inputs and activations the ways transformers does."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x, ids):
        # ProphetNet's _shift_right: a bool read with .item(), asserted with a message (the torch.all
        # feeding it has no engine translation: it is read by the dropped assert only).
        assert torch.all(ids >= 0).item(), "Verify that `ids` has only positive values"
        h = self.proj(x)
        # I-BERT's QuantAct: two tensor conditions joined by `and`, with a message.
        assert h.isnan().sum() == 0 and x.isnan().sum() == 0, (
            "NaN detected when computing min/max of the activation"
        )
        return nn.functional.cross_entropy(h, ids)


def _batch(batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 4, generator=g), torch.randint(0, 3, (batch,), generator=g)


def test_asserts_on_tensor_values_train_in_the_engine_as_eager():
    torch.manual_seed(0)
    eager = AssertingHead()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    for step, batch in enumerate((3, 5, 3)):
        x, ids = _batch(batch, step)
        want, got = eager(x, ids), ours(x, ids)
        assert ours.fallback_reason is None
        torch.testing.assert_close(got, want)
        want.backward()
        got.backward()
        for (name, pe), (_, po) in zip(eager.named_parameters(), ours.named_parameters()):
            torch.testing.assert_close(po.grad, pe.grad, msg=name)
            pe.grad = po.grad = None


class Branching(nn.Module):
    def forward(self, x, ids):
        if (ids < 0).sum() == 0:  # a branch on data: no assert, the export cannot know which way
            return x.sum()
        return x.mean()


class AssertingEither(nn.Module):
    def forward(self, x, ids):
        assert (ids < 0).sum() == 0 or x.sum() > 0  # a false `a` goes on to test `b`: not an assert of `a`
        return x.sum()


@pytest.mark.parametrize("module", [Branching(), AssertingEither()], ids=["if", "assert-or"])
def test_a_test_on_data_that_is_not_an_assert_is_a_checked_branch(module):
    """An `if`, or an `assert a or b`'s `a`, is a branch on data: captured on the branch the batch
    takes and checked on every call (branch_checks.py), one capture per branch."""
    ours = trainrt.RTModule(copy.deepcopy(module))
    for step, positive in enumerate((True, False, True, False)):
        x, ids = _batch(3, step)
        x, ids = x.abs() + 0.1, ids.abs() if positive else -ids.abs() - 1  # x.sum() > 0: the assert holds
        torch.testing.assert_close(ours(x, ids), module(x, ids))
        assert ours.fallback_reason is None
    assert ours.num_captures == 2


def test_an_assert_that_fails_on_the_batch_says_so():
    """A batch whose `assert a or b` fails in eager fails the capture, with the model's error named."""
    x, ids = _batch(3, 0)
    with pytest.raises(CaptureError, match="data-dependent.*AssertionError"):
        capture(AssertingEither(), (-x.abs() - 0.1, -ids.abs() - 1), {})


def _where_bool_is_taken(fn) -> list[bool]:
    """false_path_raises_assertion at each conditional test of fn, in bytecode order."""
    tests = [i.offset for i in dis.get_instructions(fn.__code__) if "JUMP" in i.opname and "IF" in i.opname]
    return [false_path_raises_assertion(fn.__code__, offset) for offset in tests]


def test_the_bytecode_walk_finds_asserts_only():
    def asserts(a, b):
        assert a, "message"
        assert a and b, f"computed {a}"
        assert a

    def others(a, b):
        if a:
            return 1
        assert a or b
        return a and b

    assert all(_where_bool_is_taken(asserts))
    walked = _where_bool_is_taken(others)
    # `if a`, `assert a or b`'s `a` (false goes on to b), its `b` (an assert), `a and b` as a value
    assert walked[:2] == [False, False] and walked[2] and not any(walked[3:]), walked
