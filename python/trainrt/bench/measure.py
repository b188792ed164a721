"""Runs the modes of one model in one process and measures them.

Order of events, per model:
  1. one model is built under torch.manual_seed(0); every mode trains a deep copy of it; one untimed
     eager step on a throwaway copy first takes torch's one-time process set-up out of the numbers;
  2. each mode in turn runs its first step (timed: capture / compile / build happen here) and its
     warm-up steps; the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) is read
     around this phase, so each mode's number is the RSS growth of its own first steps;
     an RTModule mode's first step finds the suite's export cache dir empty (cache cold) and fills it;
     then a fresh process times the same first step with that dir (cache warm, first_step.py);
  3. one more step of each mode, untimed, under torch.profiler's memory events: its peak tensor
     bytes (tensor_memory.py; the same measure for every mode, engine storage included);
  4. the timed steps, interleaved: step i runs every mode on the same batch before step i + 1, in
     an order that rotates each step, so machine noise and position in the round hit all modes alike.
A mode that raises (torch.compile without a working compiler, say) is reported with its error and
the others go on.
"""

from __future__ import annotations

import copy
import gc
import os
import statistics
import time
import traceback

import numpy as np
import torch

from trainrt import _C
from trainrt.bench.models import ModelSpec
from trainrt.bench.first_step import warm_first_step
from trainrt.bench.modes import MODES, RT
from trainrt.bench.rss import reset_peak_rss, status_kib
from trainrt.bench.tensor_memory import engine_bytes_held, step_tensor_bytes


def _first_steps(mode, spec: ModelSpec, warmup: int) -> dict:
    reset = reset_peak_rss()
    rss_before = status_kib("VmRSS")
    start = time.perf_counter()
    first_loss = mode.step(spec.batch(0)).item()
    first_step_s = time.perf_counter() - start
    for i in range(warmup):
        mode.step(spec.batch(1 + i))
    return {"first_step_s": first_step_s, "first_loss": first_loss,
            # The kernel syncs each thread's RSS counters lazily (up to 64 pages per thread), so a step that
            # grows nothing can read a high-water mark slightly under the RSS before it: that is no growth.
            "peak_rss_increase_bytes": max(0, status_kib("VmHWM") - rss_before) * 1024,
            "peak_rss_reset": reset}


def _warm_process(spec: ModelSpec, model: torch.nn.Module) -> None:
    """One untimed eager step on a throwaway copy: torch's lazy one-time set-up (thread pool, BLAS
    and oneDNN initialization) then does not land on whichever mode happens to go first."""
    copy.deepcopy(model)(*spec.batch(0)).backward()


def run_model(spec: ModelSpec, mode_names: list[str], warmup: int, steps: int, peak_flops: float) -> dict:
    torch.manual_seed(0)
    model = spec.make()
    _warm_process(spec, model)
    results: dict[str, dict] = {}
    running = {}
    for name in mode_names:
        try:
            # An earlier model's RTModule engines hang in reference cycles (autograd graph, module):
            # freed by the collector only, which would otherwise free them during this mode's first
            # steps and hide that much of its growth (the cnn after the mlp read 27 MiB, not 50).
            gc.collect()
            engine_before = _C.storage_bytes()["live"]
            mode = MODES[name](model, spec.sgd)
            results[name] = _first_steps(mode, spec, warmup)
            problem = mode.problem()
            if not problem and isinstance(mode, RT) and os.environ.get("TRAINRT_CACHE_DIR"):
                results[name]["first_step_warm"] = warm_first_step(spec.name, name, os.environ["TRAINRT_CACHE_DIR"])
            if not problem:
                results[name].update(step_tensor_bytes(mode, spec.batch(1 + warmup),
                                                       engine_bytes_held(engine_before, mode)))
        except Exception as err:  # a broken mode is a result, not the end of the suite
            problem = f"{type(err).__name__}: {err}".strip()
            traceback.print_exc()
        if problem:
            results[name] = {"error": problem}
        else:
            running[name] = mode

    times = {name: [] for name in running}
    losses = {}
    order = list(running)
    for i in range(steps if order else 0):
        args = spec.batch(2 + warmup + i)
        shift = i % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            loss = running[name].step(args)
            times[name].append(time.perf_counter() - start)
            losses[name] = loss.item()

    for name, mode in running.items():
        t = times[name]
        median = statistics.median(t) if t else float("nan")
        results[name].update({
            "steps": len(t),
            "step_median_s": median,
            "step_p10_s": float(np.percentile(t, 10)) if t else float("nan"),
            "step_p90_s": float(np.percentile(t, 90)) if t else float("nan"),
            "last_loss": losses.get(name),
            "flops_per_s": spec.flops_per_step / median,
            "fraction_of_peak": spec.flops_per_step / median / peak_flops,
        })
        engine = mode.engine_memory()
        if engine is not None:
            results[name]["engine_memory"] = engine
    return {"model": spec.name, "description": spec.description, "flops_per_step": spec.flops_per_step,
            "warmup_steps": warmup, "modes": results}
