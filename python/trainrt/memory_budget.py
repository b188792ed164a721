"""TRAINRT_MEMORY_BUDGET_MB: the least recompute whose peak fits a memory budget.

The plans, from the least recompute (fastest) to the most:
  1. the memory level and config as set (TRAINRT_MEMORY_OPT_LEVEL, TRAINRT_MEMORY_OPT_CONFIG);
  2. plus every recompute pattern plan 1 found and did not apply (the MemoryOptimizer Summary's rows,
     turned on in the config);
  3. that at memory level 1 (each layer recomputed but its products' outputs);
  4. that at memory level 2 (each layer recomputed, products too).
Each is built and measured on the first call's inputs: one trial forward and backward of the engine
programs alone (no autograd, no parameter or buffer written, the loss's gradient a tensor of ones),
and its peak is the most engine storage live at once during it (arena, saved values, gradients,
run-time sized values), which is what the step adds beyond parameters and optimizer state. The first
plan whose peak fits is kept; when none does, the one with the smallest peak is kept and a warning
says by how much it misses. A model with PythonOps (a user's autograd.Function, which a trial would run) is
not measured: the settings as given stay, with a warning.

    engine, choice = fit_budget(make, level, config, budget_bytes, trial)
    choice.describe()   # the start-up table's line: "every recompute pattern fits 120 MiB (as set: ...)"
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import torch

from trainrt import _C
from trainrt.engine_arrays import capsules, engine_view, from_engine

_log = logging.getLogger("trainrt")


def _with_all_patterns(config: str, patterns: list[dict]) -> str:
    """`config` plus "<pattern>:1:-1" for each pattern found and not applied that it does not name."""
    named = _C.parse_memory_opt_config(config)
    extra = [f"{p['pattern']}:1:-1" for p in patterns if p["found"] and not p["applied"] and p["pattern"] not in named]
    return ",".join(x for x in [config.strip(" ,"), *extra] if x)


def trial_peak(engine, inputs: list[torch.Tensor]) -> int:
    """Engine storage bytes live at most during one forward and backward of `engine` on `inputs`
    (module tensors then user tensors, as a call gives them), beyond what was live before."""
    views = [engine_view(t) for t in inputs]
    before = _C.storage_bytes()["live"]
    _C.reset_storage_peak()
    state = _C.ForwardState()
    outputs = [from_engine(o) for o in engine.programs.forward(capsules(views), state, 0)]
    seeds = [torch.ones_like(o) for o, d in zip(outputs[engine.num_mutations:], engine.captured.differentiable_outputs)
             if d]
    del outputs
    engine.programs.backward(state, capsules(seeds), None, False)
    return _C.storage_bytes()["peak"] - before


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n < 10 * 2**20 else f"{n / 2**20:.1f} MiB"


@dataclasses.dataclass
class BudgetChoice:
    """Which plan a budget kept: its name, whether it fits, and each plan tried with its trial peak."""

    budget: int                   # bytes
    kept: str                     # the plan's name
    fits: bool
    peaks: dict[str, int]         # plan name -> trial peak in bytes, in the order tried

    def describe(self) -> str:
        tried = "; ".join(f"{name}: {_mib(peak)}" for name, peak in self.peaks.items())
        if self.fits:
            return f"{self.kept} fits {_mib(self.budget)} ({tried})"
        return f"none fits {_mib(self.budget)}, the smallest kept ({tried})"


def fit_budget(make: Callable[[int, str], object], level: int, config: str, budget: int,
               trial: Callable[[object], int]) -> tuple[object, BudgetChoice | None]:
    """The engine of the first plan whose trial peak is at most `budget` bytes (make(level, config)
    builds one), and which plan that is; None for a model with PythonOps (not measured)."""
    engine = make(level, config)
    if engine.python_ops:
        _log.warning("trainrt: TRAINRT_MEMORY_BUDGET_MB is not applied to a model with autograd.Functions "
                     "(PythonOp): a trial step would run them; the memory settings stay as given")
        return engine, None
    all_patterns = _with_all_patterns(config, engine.programs.recompute_patterns)
    plans = {"as set": (level, config), "every recompute pattern": (level, all_patterns),
             "level 1 and every pattern": (max(level, 1), all_patterns),
             "level 2 and every pattern": (2, all_patterns)}
    peaks, built = {}, {}
    smallest = None
    for name, settings in plans.items():
        if settings in built.values():
            continue
        if built:
            engine = make(*settings)
        built[name] = settings
        peaks[name] = trial(engine)
        if peaks[name] <= budget:
            return engine, BudgetChoice(budget, name, True, peaks)
        if smallest is None or peaks[name] < peaks[smallest[0]]:
            smallest = (name, engine)
    name, engine = smallest
    _log.warning("trainrt: no memory plan fits TRAINRT_MEMORY_BUDGET_MB=%g: the smallest (%s) needs %s, %s more",
                 budget / 2**20, name, _mib(peaks[name]), _mib(peaks[name] - budget))
    return engine, BudgetChoice(budget, name, False, peaks)
