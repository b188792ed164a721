"""RTModule's memory: what a step holds and what capture leaves behind.

- gradients reach param.grad zero-copy, in the engine's storage, and the next step writes the same
  storage again (no copy into torch, no second set);
- from the second step on a step allocates no engine storage beyond what the first left (saved
  values and gradients are written over the previous step's once released);
- capture does not keep the ExportedProgram alive.
"""

import torch

import trainrt
from trainrt import _C


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


def _step(model, x, y):
    for p in model.parameters():
        p.grad = None
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def test_gradients_are_engine_storage_written_again_each_step():
    model = trainrt.RTModule(_mlp())
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    engine = None
    pointers = []
    for _ in range(3):
        _step(model, x, y)
        engine = engine or model.engines[0]
        pointers.append([p.grad.data_ptr() for p in model.parameters()])
    assert model.fallback_reason is None
    assert pointers[0] == pointers[1] == pointers[2]
    # Same values as eager, so the reused storage holds this step's gradients.
    reference = _mlp()
    _step(reference, x, y)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_later_steps_allocate_no_engine_storage():
    model = trainrt.RTModule(_mlp())
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    _step(model, x, y)  # capture, plans, arenas, the first saved values and gradients
    held = _C.storage_bytes()["live"]
    for _ in range(3):
        _C.reset_storage_peak()
        loss = _step(model, x, y)
        # Small per-step outputs aside (a few cache lines), nothing new: before the fix the second
        # forward took a second set of saved values.
        assert _C.storage_bytes()["peak"] <= held + 1024
        del loss
    assert _C.storage_bytes()["live"] <= held


# In a fresh interpreter: pytest's log capture keeps the records torch.export logs, and with them
# references to what it exported.
_EXPORT_CHECK = """
import gc, sys, weakref
import torch
import trainrt, trainrt.capture.api as api
sys.path.insert(0, {tests!r})
from test_rtmodule_memory import _mlp, _step
exported, export = [], api.export_program
def export_program(*args, **kwargs):
    ep = export(*args, **kwargs)
    exported.append(weakref.ref(ep))
    return ep
api.export_program = export_program
model = trainrt.RTModule(_mlp())
_step(model, torch.randn(8, 16), torch.randn(8, 4))
gc.collect()
assert exported and model.num_captures == 1 and model.fallback_reason is None
print([ep() is None for ep in exported])
"""


def test_capture_does_not_keep_the_exported_program_alive():
    import os
    import pathlib
    import subprocess
    import sys

    tests = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _EXPORT_CHECK.format(tests=tests)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    freed = eval(out.stdout.strip().splitlines()[-1])
    assert freed and all(freed), freed
