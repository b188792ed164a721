"""DDP on 2 ranks against one process on the same global batch: eager beside RTModule, step time.

    python -m trainrt.bench.ddp                               # gpt2-mini and mlp, 10 timed steps
    python -m trainrt.bench.ddp --models gpt2-mini --steps 20 --trace ddp_step.json
    python -m trainrt.bench --modes eager,rtmodule,ddp        # the same, as a mode of the suite (run, markdown)

Each rank is a spawned process (gloo on loopback, one thread each: 2 ranks share this machine's 2
cores) training its half of each global batch; in each rank the modes run interleaved, step by
step, behind a barrier, and a step's time is the slowest rank's (an all-reduce of the max). The
modes: eager DDP, RTModule DDP with gradients leaving the engine as they become final (the default
under torch.distributed: trainrt/gradient_handoff.py), and RTModule DDP with every gradient at the
end of the engine's backward (TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT=0), which shows what the
overlap of all-reduce and backward is worth. Beside them, one process on the whole global batch with
both cores, eager and RTModule. Medians over the timed steps; ratios are RTModule / eager.

After the timed steps, one more step of each DDP mode counts the gradients its backward holds (rank
0's; both ranks hold the same), trainrt.bench.tensor_memory.gradient_bytes_during: the most bytes of
parameter gradients held at once, torch's param.grad and the engine's gradients torch does not have
yet, each storage once; and the most of those the engine held before torch had them. No backward
here frees a gradient (torch takes the engine's without a copy and keeps it until zero_grad), so
the first peaks at every gradient in each mode; the hand-over changes the second: all of them at
the end of the engine's backward without it, one group handed over (1 MiB or more, or one large
gradient) with it. Not counted: DDP's buckets, another copy of every gradient that DDP allocates
when it is built, the same in each mode.

--trace writes a Chrome trace (torch.profiler) of one RTModule DDP step on rank 0 and counts the
all-reduces that ran inside the engine's backward (the _RTFunctionBackward node).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from trainrt.bench.models import MODELS
from trainrt.bench.tensor_memory import gradient_bytes_during
from trainrt.testing import run_on_ranks

_MODES = ("eager", "rtmodule", "rtmodule, at the end")


def _wrap(mode: str, model: torch.nn.Module) -> torch.nn.Module:
    if mode == "eager":
        return model
    import trainrt

    before = os.environ.get("TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT")
    os.environ["TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT"] = "0" if mode.endswith("at the end") else "auto"
    try:
        return trainrt.RTModule(model)  # reads the variable now
    finally:
        if before is None:
            del os.environ["TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT"]
        else:
            os.environ["TRAINRT_ENABLE_MEM_EFFICIENT_GRAD_MGMT"] = before


def _half(args: tuple, rank: int, world_size: int) -> tuple:
    rows = args[0].shape[0] // world_size
    return tuple(a[rank * rows:(rank + 1) * rows] for a in args)


def _step(model, optimizer, args) -> None:
    model(*args).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _gradient_bytes(model, optimizer, args) -> dict:
    """One untimed step of a DDP model, the gradient bytes its backward holds (the module docstring
    says what): {"peak_bytes", "engine_peak_bytes"}."""
    loss = model(*args)
    held = gradient_bytes_during(loss.backward, model.parameters(), getattr(model.module, "engines", []))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return held


def _ranks_main(rank: int, world_size: int, name: str, warmup: int, steps: int, trace: str | None) -> dict:
    spec = MODELS[name]()
    runs = {}
    for mode in _MODES:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(_wrap(mode, spec.make()))
        runs[mode] = (model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
    times = {mode: [] for mode in _MODES}
    for step in range(warmup + steps):
        args = _half(spec.batch(step), rank, world_size)
        for mode, (model, optimizer) in runs.items():
            torch.distributed.barrier()
            start = time.perf_counter()
            _step(model, optimizer, args)
            elapsed = torch.tensor(time.perf_counter() - start)
            torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
            if step >= warmup:
                times[mode].append(elapsed.item())
    args = _half(spec.batch(warmup + steps), rank, world_size)
    result = {"step_s": {mode: statistics.median(t) for mode, t in times.items()},
              "gradients_held": {mode: _gradient_bytes(*runs[mode], args) for mode in _MODES}}
    for mode, (model, _) in runs.items():
        problem = getattr(model.module, "fallback_reason", None)
        if problem is not None:
            raise RuntimeError(f"{name} {mode}: fell back to PyTorch: {problem}")
    if trace and rank == 0:
        result["trace"] = _trace_one_step(*runs["rtmodule"], _half(spec.batch(0), rank, world_size), trace)
    elif trace:
        _step(*runs["rtmodule"], _half(spec.batch(0), rank, world_size))  # rank 1's side of the traced step
    return result


def _trace_one_step(model, optimizer, args, path: str) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _step(model, optimizer, args)
    prof.export_chrome_trace(path)
    events = prof.events()
    backward = [e for e in events if "RTFunctionBackward" in e.name]
    reduces = [e for e in events if "allreduce" in e.name.replace("_", "").lower()]
    if not backward:
        return f"{path}: no engine backward found"
    start, end = backward[0].time_range.start, backward[0].time_range.end
    inside = sum(start <= e.time_range.start <= end for e in reduces)
    return f"{path}: {inside} of {len(reduces)} all-reduces started inside the engine's backward"


def _one_process(name: str, warmup: int, steps: int) -> dict:
    spec = MODELS[name]()
    runs = {}
    for mode in ("eager", "rtmodule"):
        torch.manual_seed(0)
        model = _wrap(mode, spec.make())
        runs[mode] = (model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
    times = {mode: [] for mode in runs}
    for step in range(warmup + steps):
        args = spec.batch(step)
        for mode, (model, optimizer) in runs.items():
            start = time.perf_counter()
            _step(model, optimizer, args)
            if step >= warmup:
                times[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(t) for mode, t in times.items()}


def run(name: str, warmup: int = 2, steps: int = 10, trace: str | None = None) -> dict:
    """One model's figures: 2 ranks (spawned), then one process on the whole global batch."""
    ranks = run_on_ranks(_ranks_main, name, warmup, steps, trace, timeout=1800)[0]
    gradient_bytes = 4 * sum(p.numel() for p in MODELS[name]().make().parameters())
    return {"model": name, "one_process": _one_process(name, warmup, steps), "ddp": ranks["step_s"],
            "gradients_held": ranks["gradients_held"], "gradient_bytes": gradient_bytes, **({"trace": ranks["trace"]} if trace else {})}


def markdown(rows: list[dict]) -> str:
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    mib = lambda b: f"{b / (1 << 20):.2f}"  # noqa: E731
    lines = ["| model | 1 process: eager ms | RTModule ms | ratio | DDP x2: eager ms | RTModule ms | ratio "
             "| RTModule, gradients at the end ms | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        single, ddp = r["one_process"], r["ddp"]
        lines.append(f"| {r['model']} | {ms(single['eager'])} | {ms(single['rtmodule'])} "
                     f"| {single['rtmodule'] / single['eager']:.2f} | {ms(ddp['eager'])} | {ms(ddp['rtmodule'])} "
                     f"| {ddp['rtmodule'] / ddp['eager']:.2f} | {ms(ddp['rtmodule, at the end'])} "
                     f"| {ddp['rtmodule, at the end'] / ddp['eager']:.2f} |")
    lines += ["", "| model (DDP x2, rank 0) | gradients MiB | gradients held in the backward at most, MiB (of them in "
              "the engine, not yet torch's): eager | RTModule | RTModule, gradients at the end |", "|---|---|---|---|---|"]
    for r in rows:
        held = [r["gradients_held"][mode] for mode in _MODES]
        lines.append(f"| {r['model']} | {mib(r['gradient_bytes'])} | "
                     + " | ".join(f"{mib(h['peak_bytes'])} ({mib(h['engine_peak_bytes'])})" for h in held) + " |")
    lines += [r["trace"] for r in rows if "trace" in r]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2-mini,mlp")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--trace", default=None, help="Chrome trace of one RTModule DDP step (rank 0)")
    args = parser.parse_args(argv)
    rows = [run(name, args.warmup, args.steps, args.trace) for name in args.models.split(",")]
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
