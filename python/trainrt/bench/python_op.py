"""The fixed cost of one user autograd.Function call run by the engine as PythonOp (forward + backward).

A 16 x 32 Linear followed by `calls` gradient-reversal Functions (a view forward, g * -1 backward:
no work of their own), against the same Linear with none; both through RTModule, and the same two
in eager. The difference over `calls` is what one Function costs per training step: the engine's
call into Python, torch's apply with a real ctx, and autograd.grad for the user's backward.

    python -m trainrt.bench.python_op                 # 10 Functions, 300 steps, 3 rounds
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -g


class _Chain(nn.Module):
    def __init__(self, calls: int):
        super().__init__()
        self.fc, self.calls = nn.Linear(32, 32), calls

    def forward(self, x):
        h = self.fc(x)
        for _ in range(self.calls):
            h = _Reverse.apply(h)
        return h.sum()


def _median_step_us(model: nn.Module, x: torch.Tensor, steps: int) -> float:
    for _ in range(10):
        model(x).backward()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(x).backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def run(calls: int = 10, steps: int = 300, rounds: int = 3) -> dict:
    """Per front end (eager, RTModule): the median step with and without `calls` Functions, and the
    cost of one Function call (forward + backward) in µs. Rounds alternate the variants."""
    import trainrt

    x = torch.randn(16, 32)
    models = {("eager", 0): _Chain(0), ("eager", calls): _Chain(calls),
              ("rtmodule", 0): trainrt.RTModule(_Chain(0)), ("rtmodule", calls): trainrt.RTModule(_Chain(calls))}
    samples: dict = {k: [] for k in models}
    for _ in range(rounds):
        for key, model in models.items():
            samples[key].append(_median_step_us(model, x, steps))
    step = {k: statistics.median(v) for k, v in samples.items()}
    result = {"calls": calls, "steps": steps, "rounds": rounds}
    for front in ("eager", "rtmodule"):
        result[front] = {"step_us": step[(front, 0)], f"step_us_with_{calls}": step[(front, calls)],
                         "us_per_call": (step[(front, calls)] - step[(front, 0)]) / calls}
    engine = models[("rtmodule", calls)]
    result["in_engine"] = engine.fallback_reason is None and any(
        n.op_type == "PythonOp" for e in engine.engines for n in e.captured.model.graph.node)
    return result


def markdown(figures: dict) -> str:
    calls = figures["calls"]
    lines = [f"| autograd.Function call (forward + backward) | step, no Function (µs) | step, {calls} Functions (µs) "
             "| µs per call |", "|---|---|---|---|"]
    for front, label in (("eager", "eager"), ("rtmodule", "RTModule (PythonOp)")):
        f = figures[front]
        lines.append(f"| {label} | {f['step_us']:.0f} | {f[f'step_us_with_{calls}']:.0f} | {f['us_per_call']:.1f} |")
    if not figures["in_engine"]:
        lines.append("\nRTModule did not run the Functions as PythonOp: the figures are not the engine's.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    print(markdown(run(a.calls, a.steps, a.rounds)))


if __name__ == "__main__":
    main()
