"""The engine's thread count follows torch.get_num_threads() at each call, unless TRAINRT_NUM_THREADS
says otherwise (trainrt/threads.py, core/thread_budget.h)."""

import pytest
import torch

import trainrt
import trainrt.threads
from trainrt import _C


@pytest.fixture(autouse=True)
def _engine_only_and_torch_threads_restored(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
    _C.set_num_threads(0)
    trainrt.threads._current = None


def _step(model):
    loss = model(torch.randn(8, 16)).sum()
    loss.backward()
    assert model.fallback_reason is None


def _pool_size() -> int:
    _C.set_num_threads(0)
    trainrt.threads._current = None
    return _C.get_num_threads()


def test_engine_threads_follow_torch_set_num_threads():
    pool = _pool_size()
    model = trainrt.RTModule(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    torch.set_num_threads(1)
    _step(model)
    assert _C.get_num_threads() == 1
    torch.set_num_threads(2)
    _step(model)
    assert _C.get_num_threads() == min(2, pool)


def test_trainrt_num_threads_wins_over_torch(monkeypatch):
    monkeypatch.setenv("TRAINRT_NUM_THREADS", "1")
    torch.set_num_threads(2)
    model = trainrt.RTModule(torch.nn.Linear(16, 4))
    _step(model)
    assert _C.get_num_threads() == 1


def test_a_bad_thread_count_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRAINRT_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="TRAINRT_NUM_THREADS"):
        trainrt.RTModule(torch.nn.Linear(16, 4))
