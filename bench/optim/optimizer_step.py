"""Optimizer step time on GPT-2 small's 124M f32 parameters: trainrt FusedAdam against torch.optim.AdamW
(foreach=True and fused=True), in one process, with achieved GB/s against the measured copy bandwidth.

The step is bandwidth-bound: per parameter it reads p, g, m, v and writes p, m, v, 28 bytes. The copy
bandwidth is what torch reaches copying one large f32 tensor (bytes read + bytes written): clone()
(a fresh destination, as the brief of the issue asks) and copy_() into a preallocated one (no page
faults, the fairer ceiling). The optimizers share one set of parameters and gradients, each has its
own state; after two untimed steps (state creation, page faults) every round times each of them once,
in a rotating order so that load from other work on the machine hits all alike, and the table shows
the median and the best over rounds. A last line measures FusedAdam's fixed cost per step (checks,
DLPack views, the engine call) on 148 one-element parameters.

    .venv/bin/python bench/optim/optimizer_step.py --rounds 10
    .venv/bin/python bench/optim/optimizer_step.py --rounds 3 --scale 0.1    # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from trainrt.optim import FusedAdam

BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v (f32)


def gpt2_small_shapes(scale: float = 1.0) -> list[tuple[int, ...]]:
    """GPT-2 small (124M): token and position embeddings, 12 blocks, final layer norm; weights tied."""
    vocab, context, c, layers = max(1, int(50257 * scale)), max(1, int(1024 * scale)), 768, 12
    shapes = [(vocab, c), (context, c)]
    for _ in range(layers):
        shapes += [(c,), (c,), (c, 3 * c), (3 * c,), (c, c), (c,), (c,), (c,), (c, 4 * c), (4 * c,), (4 * c, c), (c,)]
    return shapes + [(c,), (c,)]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(runs: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of every run, `rounds` times each, the order rotating round by round."""
    names = list(runs)
    for name in names:  # untimed: lazy state, first-touch page faults
        runs[name]()
        runs[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name].append(timed(runs[name]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the embeddings (quick runs)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in gpt2_small_shapes(args.scale)]
    for p in params:
        p.grad = torch.randn(p.shape) * 1e-3
    n = sum(p.numel() for p in params)
    lr = 1e-6  # the parameters stay in range however often they are stepped
    optimizers = {
        "trainrt FusedAdam": FusedAdam(params, lr=lr, weight_decay=0.01),
        "torch AdamW foreach=True": torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=True),
        "torch AdamW fused=True": torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True),
    }
    src, dst = torch.randn(n), torch.empty(n)
    runs = {name: opt.step for name, opt in optimizers.items()}
    runs["copy: torch clone"] = lambda: src.clone()
    runs["copy: dst.copy_(src)"] = lambda: dst.copy_(src)
    times = measure(runs, args.rounds)

    tiny = [torch.nn.Parameter(torch.zeros(1)) for _ in range(len(params))]
    for p in tiny:
        p.grad = torch.ones(1)
    tiny_opt = FusedAdam(tiny)
    overhead = measure({"tiny": tiny_opt.step}, max(args.rounds, 50))["tiny"]

    copy_gbs = max(2 * 4 * n / statistics.median(times[k]) / 1e9 for k in ("copy: torch clone", "copy: dst.copy_(src)"))
    print(f"{len(params)} tensors, {n / 1e6:.1f}M f32 parameters, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads, {args.rounds} rounds")
    print()
    print("| what | median ms | best ms | GB/s (median) | of copy GB/s |")
    print("|---|---:|---:|---:|---:|")
    results = {}
    for name, ts in times.items():
        med, best = statistics.median(ts), min(ts)
        nbytes = 2 * 4 * n if name.startswith("copy") else BYTES_PER_PARAM * n
        gbs = nbytes / med / 1e9
        results[name] = {"median_ms": med * 1e3, "best_ms": best * 1e3, "gb_per_s": gbs}
        print(f"| {name} | {med * 1e3:.1f} | {best * 1e3:.1f} | {gbs:.1f} | {gbs / copy_gbs:.2f} |")
    fused = results["trainrt FusedAdam"]["median_ms"]
    print()
    for name in ("torch AdamW foreach=True", "torch AdamW fused=True"):
        print(f"FusedAdam speed-up over {name}: {results[name]['median_ms'] / fused:.2f}x")
    copy_ms = BYTES_PER_PARAM * n / copy_gbs / 1e6
    print(f"FusedAdam time / copy-bandwidth time for 28 bytes/param: {fused / copy_ms:.2f}x")
    print(f"FusedAdam fixed cost per step ({len(tiny)} one-element params): "
          f"{statistics.median(overhead) * 1e6:.0f} us median")
    if args.json:
        print(json.dumps({"params": n, "tensors": len(params), "results": results,
                          "fixed_cost_us": statistics.median(overhead) * 1e6}))


if __name__ == "__main__":
    main()
