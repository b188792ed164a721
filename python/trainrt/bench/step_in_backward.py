"""A training step dominated by its optimizer: AdamW after the backward, or inside it (step_in_backward).

The model is a stack of square f32 Linear layers (default 13 of 3072 x 3072: 122.7M parameters, GPT-2
small's count) fed 8 rows, so forward and backward are a few GFLOP while the optimizer moves 28 bytes
per parameter (read p, g, m, v; write p, m, v: 3.4 GB). A step after the backward cannot move fewer;
stepping each parameter inside the engine's backward reads the gradient while it is still in cache
and never writes all gradients to fresh memory (trainrt/optim/step_in_backward.py). A gradient of more
than 4 MiB made by a product (a Linear weight's dW = dY^T X) is made and stepped in 2 MiB row blocks,
each while still in cache (runtime/output_consumer.h): a 3072 x 3072 f32 gradient (36 MiB, more than this
machine's 32 MiB L3) is then never in memory whole. --width 1536 --layers 52 or --width 768 --layers 208
give the same parameter count in smaller weights; --gpt2 a chain of GPT-2 small's weight shapes (12 x
(768 -> 2304 -> 768 -> 3072 -> 768), then a 768 -> 50257 head: 138M parameters; no tied embedding).

Timed, in one process: one training step (forward + backward + optimizer) for
- eager + torch AdamW(fused=True), eager + torch AdamW(foreach=True),
- RTModule + FusedAdam, RTModule + FusedAdam(step_in_backward=True);
and forward + backward alone (eager, RTModule) so the optimizer's share shows: a variant's step minus
forward + backward alone of the same front end, and the bandwidth it stands for at 28 bytes per
parameter (what a step after the backward must move; inside the backward some of it stays in cache,
so its figure is an effective one, not bytes measured in memory). One model serves all
(lr 1e-6 keeps it in range); each optimizer's state is created for its block and freed after it.
Every round runs each variant for 2 untimed and `steps` timed steps, the order rotating from round to
round so that load from other work on the machine hits all alike; the table shows the median over all
timed steps of all rounds, and the best. "gradients held" is what the step keeps for the gradients
after the backward: the p.grad tensors, or for the engine its backward's arena plus returned outputs.

    python -m trainrt.bench.step_in_backward                      # 124M parameters, 3 rounds
    python -m trainrt.bench.step_in_backward --width 512 --rounds 1 --steps 2   # a quick look
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import torch
import torch.nn as nn

import trainrt
from trainrt.optim import FusedAdam, step_in_backward

LR = 1e-6


def make_model(width: int, layers: int, gpt2: bool = False) -> nn.Module:
    if not gpt2:
        return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    blocks = [nn.Linear(a, b) for _ in range(12) for a, b in ((768, 2304), (2304, 768), (768, 3072), (3072, 768))]
    return nn.Sequential(*blocks, nn.Linear(768, 50257, bias=False))


def _variants(model: nn.Module, rt: nn.Module):
    """name -> (module to call, a maker of the optimizer or None for forward + backward alone)."""
    return {
        "eager + torch AdamW fused=True": (model, lambda: torch.optim.AdamW(model.parameters(), lr=LR, fused=True)),
        "eager + torch AdamW foreach=True": (model, lambda: torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)),
        "RTModule + FusedAdam": (rt, lambda: FusedAdam(model.parameters(), lr=LR, weight_decay=0.01)),
        "RTModule + FusedAdam step_in_backward": (
            rt, lambda: FusedAdam(model.parameters(), lr=LR, weight_decay=0.01, step_in_backward=True)),
        "eager forward + backward only": (model, None),
        "RTModule forward + backward only": (rt, None),
    }


def _grad_bytes(model: nn.Module, rt, module) -> int:
    """Bytes holding gradients right after a backward (see the module docstring)."""
    if module is rt:
        stats = rt.engines[0].programs.memory_stats()["backward"]
        return stats["planned_arena_bytes"] + stats["output_bytes"]
    return sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)


def run(width: int = 3072, layers: int = 13, batch: int = 8, rounds: int = 3, steps: int = 5,
        gpt2: bool = False) -> dict:
    torch.manual_seed(0)
    model = make_model(width, layers, gpt2)
    rt = trainrt.RTModule(model)
    x = torch.randn(batch, 768 if gpt2 else width)
    variants = _variants(model, rt)
    times = {name: [] for name in variants}
    held = {}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            module, make_optimizer = variants[name]
            optimizer = make_optimizer() if make_optimizer else None

            def step():
                loss = module(x).square().mean()
                loss.backward()
                if optimizer is not None:
                    optimizer.step()

            for i in range(2 + steps):
                for p in model.parameters():
                    p.grad = None  # what zero_grad() does by default
                start = time.perf_counter()
                step()
                if i >= 2:
                    times[name].append(time.perf_counter() - start)
            held[name] = _grad_bytes(model, rt, module)
            for p in model.parameters():
                p.grad = None
            del optimizer  # its state goes before the next variant's is made, and with step_in_backward
            gc.collect()   # its hold on the parameters (an eager backward would step them from the hook)
            assert all(step_in_backward.owner_of(p) is None for p in model.parameters())
    n = sum(p.numel() for p in model.parameters())
    results = {name: {"median_ms": statistics.median(ts) * 1e3, "best_ms": min(ts) * 1e3,
                      "gradients_held_mb": held[name] / 1e6} for name, ts in times.items()}
    for name, v in results.items():  # the optimizer's share: the step minus forward + backward alone
        if variants[name][1] is None:
            continue
        alone = results["RTModule forward + backward only" if variants[name][0] is rt
                        else "eager forward + backward only"]["median_ms"]
        v["optimizer_ms"] = v["median_ms"] - alone
        v["optimizer_gb_per_s"] = 28 * n / (v["optimizer_ms"] * 1e-3) / 1e9 if v["optimizer_ms"] > 0 else None
    assert rt.fallback_reason is None, rt.fallback_reason
    return {"params": n, "width": width, "layers": layers, "gpt2": gpt2, "batch": batch, "rounds": rounds,
            "steps": steps, "torch_threads": torch.get_num_threads(), "results": results}


def markdown(figures: dict) -> str:
    r = figures["results"]
    shape = ("GPT-2 small's Linear shapes" if figures["gpt2"]
             else f"{figures['layers']} Linear({figures['width']}, {figures['width']})")
    lines = [f"Training step, {shape} f32, "
             f"{figures['params'] / 1e6:.1f}M parameters, batch {figures['batch']}; median of "
             f"{figures['rounds']} rounds x {figures['steps']} steps", "",
             "| what | median ms | best ms | optimizer ms | optimizer GB/s (28 B/param) | gradients held MB |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, v in r.items():
        share = f"{v['optimizer_ms']:.1f}" if "optimizer_ms" in v else "-"
        rate = f"{v['optimizer_gb_per_s']:.1f}" if v.get("optimizer_gb_per_s") else "-"
        lines.append(f"| {name} | {v['median_ms']:.1f} | {v['best_ms']:.1f} | {share} | {rate} | "
                     f"{v['gradients_held_mb']:.0f} |")
    sib = r["RTModule + FusedAdam step_in_backward"]["median_ms"]
    lines.append("")
    for name in ("eager + torch AdamW fused=True", "eager + torch AdamW foreach=True", "RTModule + FusedAdam"):
        lines.append(f"step_in_backward speed-up over {name}: {r[name]['median_ms'] / sib:.2f}x")
    lines.append("optimizer ms: the step minus forward + backward alone of the same front end (eager or RTModule)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=3072)
    parser.add_argument("--layers", type=int, default=13)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant and round")
    parser.add_argument("--gpt2", action="store_true", help="GPT-2 small's Linear shapes instead of a square stack")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    figures = run(args.width, args.layers, args.batch, args.rounds, args.steps, args.gpt2)
    print(f"torch {torch.__version__}, {figures['torch_threads']} torch threads")
    print(markdown(figures))
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
