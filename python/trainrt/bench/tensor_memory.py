"""Peak tensor bytes of one training step, the same measure for every mode: the most bytes of tensor
storage live at once during the step, parameters and optimizer state left out (activations and
what is saved for backward, gradients, temporaries, and what the engine keeps between steps).
And, for one backward, the most bytes of parameter gradients held at once.

    held = engine_bytes_held(before_mode, mode)        # after the mode's first steps
    memory = step_tensor_bytes(mode, batch, held)      # runs one (untimed) training step
    torch_bytes, engine_bytes = peak_bytes_during(loss.backward)   # any call: what it adds at its peak
    grads = gradient_bytes_during(loss.backward, params, rt.engines)   # {"peak_bytes", "engine_peak_bytes"}

Two allocators hold a step's tensors, each counted where it can be seen:
- torch's: torch.profiler with profile_memory=True records every allocation and free of the CPU
  allocator with its size and time; their running sum from the step's start peaks at the step's
  own tensors (blocks allocated before the step are not tracked, so their frees are not counted).
- the engine's (RTModule): its storage is not torch's; it counts its own (`_C.storage_bytes`).
  What one RTModule holds between steps (planned arenas, the saved values and gradients it hands
  to torch and writes again next step) is its storage growth over its first steps less its
  optimizer's state; the step's peak above its start is added to that.
The two peaks are added: an upper bound where they fall at different moments of the step.

Gradients are not told apart by either count: an engine backward frees its saved values while it
makes its gradients, so its storage's peak above the start nets one against the other (gpt2-mini
frees 81 MiB of saved values while it makes 20 MiB of gradients: +0), and the gradients it hands
to torch are engine storage, which torch's allocator never sees. gradient_bytes_during counts the
gradients themselves instead (see _GradientLedger).
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


class _GradientLedger:
    """The bytes of parameter gradients held during one backward, torch's and the engine's, each
    storage once, counted at every moment the count can change that Python sees:

    - a gradient reaches param.grad (a post-accumulate-grad hook): torch's part is the storages
      of every param.grad. In eager a gradient comes there as soon as it is complete (autograd runs
      AccumulateGrad first), so its moments in autograd's input buffer are not counted.
    - an engine backward starts and ends (_TimedPrograms). While it runs, the engine's part is its
      own count of the gradient storage its backward holds (memory_stats' backward output_bytes:
      the gradients made so far, and a buffer kept from the last step to write one again) less what
      torch took from it meanwhile. AccumulateGrad takes a handed-over gradient without a copy and
      the engine keeps its reference until its run ends, so those bytes are in both counts.
      Between two such moments the engine's part only grows (it makes gradients and frees none),
      so its largest value comes right before torch takes the next group: what the hook reads,
      plus the gradient torch just took.
    - after the engine's run its count no longer holds them (forget_outputs); what torch gets then
      (the gradients returned at the end, the last group handed over) is what the engine held at
      its end.
    Nothing frees a gradient in these backwards, so the total peaks at the end; what the hand-over
    changes is how much of it the engine holds before torch has it (engine_peak)."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.peak = 0          # most gradient bytes held at once, torch's and the engine's
        self.engine_peak = 0   # most of them the engine held before torch had them
        self.running = None    # the ModulePrograms whose backward runs now
        self.taken_in_run = 0  # bytes torch took from it during its run (still its storage too)
        self.torch_at_run_end: int | None = None

    def torch_bytes(self) -> int:
        storages = {}
        for p in self.params:
            if p.grad is not None:
                s = p.grad.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
        return sum(storages.values())

    def count(self, torch_bytes: int, engine_bytes: int) -> None:
        self.peak = max(self.peak, torch_bytes + engine_bytes)
        self.engine_peak = max(self.engine_peak, engine_bytes)

    def engine_started(self, programs) -> None:
        if self.torch_at_run_end is not None or self.running is not None:
            raise RuntimeError("gradient_bytes_during: a second engine backward in one backward (one RTModule call "
                               "is counted)")
        self.running = programs
        self.count(self.torch_bytes(), self._engine_output_bytes())

    def engine_ended(self) -> None:
        self.running = None
        self.torch_at_run_end = self.torch_bytes()

    def accumulated(self, p: torch.Tensor) -> None:
        torch_bytes = self.torch_bytes()
        if self.running is None:
            self.count(torch_bytes, 0)
            return
        taken = p.grad.untyped_storage().nbytes()
        self.count(torch_bytes - taken, self._engine_output_bytes() - self.taken_in_run)  # right before it
        self.taken_in_run += taken

    def finished(self) -> None:
        end = self.torch_bytes()
        if self.torch_at_run_end is not None:
            self.count(self.torch_at_run_end, end - self.torch_at_run_end)
        self.count(end, 0)

    def _engine_output_bytes(self) -> int:
        return self.running.memory_stats()["backward"]["output_bytes"]


class _TimedPrograms:
    """An engine's ModulePrograms that tells the ledger when its backward starts and ends; the rest
    goes to the programs. Stands in for engine.programs during the measured backward only."""

    def __init__(self, programs, ledger: _GradientLedger):
        self._programs, self._ledger = programs, ledger

    def __getattr__(self, name):
        return getattr(self._programs, name)

    def backward(self, *args, **kwargs):
        self._ledger.engine_started(self._programs)
        try:
            return self._programs.backward(*args, **kwargs)
        finally:
            self._ledger.engine_ended()


def gradient_bytes_during(backward, params, engines=()) -> dict:
    """Runs backward() (loss.backward of a forward already run) and returns the most bytes of the
    gradients of `params` held at once during it (peak_bytes; each storage once, torch's and the
    engine's), and the most of those the engine held before torch had them (engine_peak_bytes).
    `engines`: the RTModule's (rt.engines), whose backward it times; none for eager. Every
    param.grad must be None at the start (zero_grad(set_to_none=True)): the count starts from none."""
    params = list(params)
    if any(p.grad is not None for p in params):
        raise ValueError("gradient_bytes_during: a param.grad is set; the count starts from none "
                         "(zero_grad(set_to_none=True) first)")
    ledger = _GradientLedger(params)
    hooks = [p.register_post_accumulate_grad_hook(ledger.accumulated) for p in params if p.requires_grad]
    engines = list(engines)
    for engine in engines:
        engine.programs = _TimedPrograms(engine.programs, ledger)
    try:
        backward()
    finally:
        for engine in engines:
            engine.programs = engine.programs._programs
        for h in hooks:
            h.remove()
    ledger.finished()
    return {"peak_bytes": ledger.peak, "engine_peak_bytes": ledger.engine_peak}
