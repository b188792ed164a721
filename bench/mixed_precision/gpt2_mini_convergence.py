"""bf16 mixed precision against f32 on gpt2-mini: 200 AdamW steps through RTModule in each precision from
the same initial weights and batches (the suite's gpt2-mini batches: random tokens, so the loss falls
towards ln(8192) ~ 9.01 as the model learns the unigram statistics), then step times of RTModule f32,
RTModule bf16 and eager under torch.autocast, interleaved.

    .venv/bin/python bench/mixed_precision/gpt2_mini_convergence.py [--steps 200] [--timed 10]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

import trainrt
from trainrt.bench.models import MODELS


def train(model, batches, steps: int, autocast: bool) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(*batches(i))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--timed", type=int, default=10)
    args = parser.parse_args()
    spec = MODELS["gpt2-mini"]()
    torch.manual_seed(0)
    base = spec.make()
    runs = {"RTModule f32": (trainrt.RTModule(copy.deepcopy(base)), False),
            "RTModule bf16": (trainrt.RTModule(copy.deepcopy(base)), True),
            "eager autocast bf16": (copy.deepcopy(base), True)}
    final = {}
    for name in ("RTModule f32", "RTModule bf16"):
        model, autocast = runs[name]
        losses = train(model, spec.batch, args.steps, autocast)
        final[name] = statistics.mean(losses[-10:])
        print(f"{name}: loss {losses[0]:.4f} -> {final[name]:.4f} (mean of the last 10 of {args.steps} steps)")
    gap = abs(final["RTModule bf16"] - final["RTModule f32"]) / final["RTModule f32"]
    print(f"bf16 vs f32 final loss: {100 * gap:.2f}% apart (target: within 2%)")

    times = {name: [] for name in runs}
    for name, (model, autocast) in runs.items():  # warm-up (eager autocast's first step)
        train(model, lambda i: spec.batch(10_000 + i), 2, autocast)
    for i in range(args.timed):
        for name, (model, autocast) in runs.items():
            start = time.perf_counter()
            train(model, lambda j: spec.batch(20_000 + i), 1, autocast)
            times[name].append(time.perf_counter() - start)
    f32 = statistics.median(times["RTModule f32"])
    for name, t in times.items():
        print(f"{name}: median step {statistics.median(t) * 1e3:.0f} ms ({statistics.median(t) / f32:.2f}x RTModule f32)")


if __name__ == "__main__":
    main()
