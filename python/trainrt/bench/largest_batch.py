"""The largest batch that fits a memory budget: GPT-2 124M (llm.c's configuration, T = 64), eager
beside RTModule at memory levels 0, 1 and 2 (TRAINRT_MEMORY_OPT_LEVEL) and torch.compile.

    python -m trainrt.bench.largest_batch                   # 4 GiB, batches 1, 2, 4, ... until one misses
    python -m trainrt.bench.largest_batch --budget-gib 2 --modes eager,rtmodule-2 --layers 4

A batch fits when parameters + optimizer state + the step's peak tensor bytes (tensor_memory.py:
activations, saved values, gradients, temporaries; measured over one step after a warm-up step) stay
within the budget. Batches double from 1 until one misses; the table gives, per mode, the largest
batch that fitted, its peak, and its step time (the median of --steps timed steps at that batch).
The modes run one after another in this process, each on its own copy of the same weights.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

import torch

from trainrt import _C
from trainrt.bench import modes as bench_modes
from trainrt.bench.models import _gpt
from trainrt.bench.tensor_memory import engine_bytes_held, step_tensor_bytes

_MODES = ("eager", "rtmodule-0", "rtmodule-1", "rtmodule-2", "compile")


def _make_mode(name: str, model: torch.nn.Module):
    if not name.startswith("rtmodule-"):
        return {"eager": bench_modes.Eager, "compile": bench_modes.Compile}[name](model)
    before = os.environ.get("TRAINRT_MEMORY_OPT_LEVEL")
    os.environ["TRAINRT_MEMORY_OPT_LEVEL"] = name.rsplit("-", 1)[1]  # read when the RTModule is made
    try:
        return bench_modes.RT(model)
    finally:  # the caller's environment as it was (a test runs this in its own process)
        if before is None:
            del os.environ["TRAINRT_MEMORY_OPT_LEVEL"]
        else:
            os.environ["TRAINRT_MEMORY_OPT_LEVEL"] = before


def _state_bytes(mode) -> int:
    params = sum(p.untyped_storage().nbytes() for p in mode.model.parameters())
    state = sum(t.untyped_storage().nbytes() for s in mode.optimizer.state.values() for t in s.values()
                if isinstance(t, torch.Tensor))
    return params + state


def _try(name: str, spec_at, batch: int, steps: int) -> tuple[int, float]:
    """(bytes of parameters + optimizer state + the step's peak tensors, median step seconds)."""
    spec = spec_at(batch)
    torch.manual_seed(0)
    gc.collect()  # the last try's engines (cycles through autograd) go before this one is counted
    before = _C.storage_bytes()["live"]
    mode = _make_mode(name, spec.make())
    mode.step(spec.batch(0))  # capture / compile, optimizer state made
    held = engine_bytes_held(before, mode) if name.startswith("rtmodule") else 0
    peak = step_tensor_bytes(mode, spec.batch(1), held)["peak_tensor_bytes"] + _state_bytes(mode)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        mode.step(spec.batch(2 + step))
        times.append(time.perf_counter() - start)
    if (problem := mode.problem()) is not None:
        raise RuntimeError(f"{name}: {problem}")
    return peak, statistics.median(times)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-gib", type=float, default=4.0)
    parser.add_argument("--modes", default=",".join(_MODES))
    parser.add_argument("--layers", type=int, default=12, help="GPT-2 124M has 12")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=256)
    args = parser.parse_args(argv)
    budget = int(args.budget_gib * 2**30)

    def spec_at(batch):
        return _gpt("gpt2-124m", layers=args.layers, dim=768, heads=12, vocab=50257, seq=args.seq, batch=batch)

    rows = []
    print(f"GPT-2 ({args.layers} x 768, vocab 50257, T={args.seq}), budget {args.budget_gib:g} GiB "
          "(parameters + optimizer state + peak tensors)")
    print("| mode | largest batch | peak GiB | step s | first batch that misses (peak GiB) |")
    print("|---|---|---|---|---|")
    for name in args.modes.split(","):
        fitted, missed, batch = None, None, 1
        while batch <= args.max_batch:
            peak, step_s = _try(name, spec_at, batch, args.steps)
            if peak > budget:
                missed = (batch, peak)
                break
            fitted, batch = (batch, peak, step_s), batch * 2
        row = {"mode": name, "fitted": fitted, "missed": missed}
        rows.append(row)
        got = f"{fitted[0]} | {fitted[1] / 2**30:.2f} | {fitted[2]:.2f}" if fitted else "none | - | -"
        miss = f"{missed[0]} ({missed[1] / 2**30:.2f})" if missed else f"none up to {args.max_batch}"
        print(f"| {name} | {got} | {miss} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
