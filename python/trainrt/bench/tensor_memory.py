"""Peak tensor bytes of one training step, the same measure for every mode: the most bytes of tensor
storage live at once during the step, parameters and optimizer state left out (activations and
what is saved for backward, gradients, temporaries, and what the engine keeps between steps).

    held = engine_bytes_held(before_mode, mode)        # after the mode's first steps
    memory = step_tensor_bytes(mode, batch, held)      # runs one (untimed) training step
    torch_bytes, engine_bytes = peak_bytes_during(loss.backward)   # any call: what it adds at its peak

Two allocators hold a step's tensors, each counted where it can be seen:
- torch's: torch.profiler with profile_memory=True records every allocation and free of the CPU
  allocator with its size and time; their running sum from the step's start peaks at the step's
  own tensors (blocks allocated before the step are not tracked, so their frees are not counted).
- the engine's (RTModule): its storage is not torch's; it counts its own (`_C.storage_bytes`).
  What one RTModule holds between steps (planned arenas, the saved values and gradients it hands
  to torch and writes again next step) is its storage growth over its first steps less its
  optimizer's state; the step's peak above its start is added to that.
The two peaks are added: an upper bound where they fall at different moments of the step.
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from trainrt import _C


def engine_bytes_held(live_before_mode: int, mode) -> int:
    """Engine storage the mode holds between steps: growth since `live_before_mode` (read before the
    mode was built; other modes' engines sit idle meanwhile) less its optimizer state there."""
    return max(0, _C.storage_bytes()["live"] - live_before_mode - mode.engine_optimizer_state_bytes())


def _torch_peak(prof) -> int:
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()  # + allocation, - free
        peak = max(peak, live)
    return peak


def peak_bytes_during(fn) -> tuple[int, int]:
    """Runs fn() and returns the most bytes live at once during it above those live at its start:
    (torch's allocator, the engine's storage)."""
    _C.reset_storage_peak()
    engine_start = _C.storage_bytes()["live"]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return _torch_peak(prof), _C.storage_bytes()["peak"] - engine_start


def step_tensor_bytes(mode, args: tuple, engine_held: int) -> dict:
    """Runs one training step of `mode` and returns its peak tensor bytes, and the two parts."""
    torch_bytes, engine_step_bytes = peak_bytes_during(lambda: mode.step(args))
    engine_bytes = engine_held + engine_step_bytes
    return {"peak_tensor_bytes": torch_bytes + engine_bytes, "torch_peak_bytes": torch_bytes,
            "engine_peak_bytes": engine_bytes}
