"""Optimizer step time on GPT-2 small's 124M f32 parameters: trainrt FusedAdam against torch.optim.AdamW
(foreach=True and fused=True), in one process, with achieved GB/s against the measured copy bandwidth.

The step is bandwidth-bound: per parameter it reads p, g, m, v and writes p, m, v, 28 bytes of memory
traffic (the writes go to lines the step has just read, so they cost one write-back each and nothing
more). The bandwidth it is judged against is what torch reaches streaming one large f32 tensor, counted
in the same currency, bytes that cross the memory bus:
- dst.copy_(src) into a preallocated dst moves 12 bytes per element, not 8: torch's copy uses ordinary
  stores, and an ordinary store to a line not in cache first reads it (write-allocate). Counting it as
  8 (bytes read + bytes written, as this file once did) understates the bandwidth by 1.5x and made
  the Adam step look faster than the "limit" (0.75x of it).
- a.add_(b) reads a and b and writes a back: 12 bytes per element with no write-allocate question,
  the check on the line above (both take the same time on this machine).
The limit of an Adam step is then 28 / 12 of the faster of the two. clone() is not a bandwidth: its
fresh destination costs a page fault per 4 KiB (several times the copy_ time here).
The optimizers share one set of parameters and gradients, each has its own state; after two untimed
steps (state creation, page faults) every round times each of them once, in a rotating order so that
load from other work on the machine hits all alike, and the table shows the median and the best over
rounds. A last line measures FusedAdam's fixed cost per step (checks, DLPack views, the engine call)
on 148 one-element parameters.

Part of the suite (`python -m trainrt.bench`); alone:
    python -m trainrt.bench.optimizer_step --rounds 15
    python -m trainrt.bench.optimizer_step --rounds 3 --scale 0.1    # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from trainrt.optim import FusedAdam

BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v (f32)
BYTES_PER_STREAMED = 12  # copy_: read src, read dst (write-allocate), write dst; add_: read a, b, write a


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


def run(rounds: int = 15, scale: float = 1.0) -> dict:
    """Times the optimizers and the copies; returns the figures (times in ms, GB/s)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in gpt2_small_shapes(scale)]
    for p in params:
        p.grad = torch.randn(p.shape) * 1e-3
    n = sum(p.numel() for p in params)
    lr = 1e-6  # the parameters stay in range however often they are stepped
    optimizers = {
        "trainrt FusedAdam": FusedAdam(params, lr=lr, weight_decay=0.01),
        "torch AdamW foreach=True": torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=True),
        "torch AdamW fused=True": torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True),
    }
    src, dst = torch.randn(n), torch.zeros(n)  # zeros: dst's pages are touched before the timing
    runs = {name: opt.step for name, opt in optimizers.items()}
    runs["copy: dst.copy_(src)"] = lambda: dst.copy_(src)
    runs["stream: a.add_(b)"] = lambda: dst.add_(src)  # dst stays a small multiple of src: copy_ resets it
    times = measure(runs, rounds)

    tiny = [torch.nn.Parameter(torch.zeros(1)) for _ in range(len(params))]
    for p in tiny:
        p.grad = torch.ones(1)
    overhead = measure({"tiny": FusedAdam(tiny).step}, max(rounds, 50))["tiny"]

    streams = ("copy: dst.copy_(src)", "stream: a.add_(b)")
    copy_gbs = max(BYTES_PER_STREAMED * n / statistics.median(times[k]) / 1e9 for k in streams)
    results = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        nbytes = BYTES_PER_STREAMED * n if name in streams else BYTES_PER_PARAM * n
        results[name] = {"median_ms": med * 1e3, "best_ms": min(ts) * 1e3, "gb_per_s": nbytes / med / 1e9,
                         "of_copy_bandwidth": nbytes / med / 1e9 / copy_gbs}
    return {"params": n, "tensors": len(params), "rounds": rounds, "copy_gb_per_s": copy_gbs,
            "results": results, "fixed_cost_us": statistics.median(overhead) * 1e6,
            "fused_adam_vs_copy_limit": results["trainrt FusedAdam"]["median_ms"] / (BYTES_PER_PARAM * n / copy_gbs / 1e6)}


def markdown(figures: dict) -> str:
    n, results = figures["params"], figures["results"]
    lines = [f"Optimizer step: {figures['tensors']} tensors, {n / 1e6:.1f}M f32 parameters (GPT-2 small shapes), "
             f"{figures['rounds']} rounds; copy bandwidth {figures['copy_gb_per_s']:.1f} GB/s "
             f"(bytes over the memory bus: a copy or add_ moves 12 per element, an Adam step 28)", "",
             "| what | median ms | best ms | GB/s (median) | of copy GB/s |", "|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['median_ms']:.1f} | {r['best_ms']:.1f} | {r['gb_per_s']:.1f} | {r['of_copy_bandwidth']:.2f} |")
    fused = results["trainrt FusedAdam"]["median_ms"]
    lines.append("")
    for name in ("torch AdamW foreach=True", "torch AdamW fused=True"):
        lines.append(f"FusedAdam speed-up over {name}: {results[name]['median_ms'] / fused:.2f}x")
    lines.append(f"FusedAdam time / copy-bandwidth time for 28 bytes/param: {figures['fused_adam_vs_copy_limit']:.2f}x")
    lines.append(f"FusedAdam fixed cost per step ({figures['tensors']} one-element params): {figures['fixed_cost_us']:.0f} us median")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the embeddings (quick runs)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    figures = run(args.rounds, args.scale)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} torch threads")
    print(markdown(figures))
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
