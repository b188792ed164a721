"""A training step dominated by its optimizer: AdamW after the backward, or inside it (step_in_backward).

The model is a stack of square f32 Linear layers (default 13 of 3072 x 3072: 122.7M parameters, GPT-2
small's count) fed 8 rows, so forward and backward are a few GFLOP while the optimizer moves 28 bytes
per parameter (read p, g, m, v; write p, m, v: 3.4 GB). A step after the backward cannot move fewer;
stepping each parameter inside the engine's backward reads the gradient while it is still in cache
and never writes all gradients to fresh memory (trainrt/optim/step_in_backward.py). In cache only if it
fits: a 3072 x 3072 f32 gradient is 36 MiB, more than this machine's 32 MiB L3, so the default model
shows the memory saving but no time saving; --width 1536 --layers 52 (9 MiB per gradient, as GPT-2
small's MLP weights) or --width 768 --layers 208 show the cache effect at the same parameter count.

Timed, in one process: one training step (forward + backward + optimizer) for
- eager + torch AdamW(fused=True), eager + torch AdamW(foreach=True),
- RTModule + FusedAdam, RTModule + FusedAdam(step_in_backward=True);
and forward + backward alone (eager, RTModule) so the optimizer's share shows. One model serves all
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


def make_model(width: int, layers: int) -> nn.Module:
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


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


def run(width: int = 3072, layers: int = 13, batch: int = 8, rounds: int = 3, steps: int = 5) -> dict:
    torch.manual_seed(0)
    model = make_model(width, layers)
    rt = trainrt.RTModule(model)
    x = torch.randn(batch, width)
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
    assert rt.fallback_reason is None, rt.fallback_reason
    return {"params": n, "width": width, "layers": layers, "batch": batch, "rounds": rounds, "steps": steps,
            "torch_threads": torch.get_num_threads(), "results": results}


def markdown(figures: dict) -> str:
    r = figures["results"]
    lines = [f"Training step, {figures['layers']} Linear({figures['width']}, {figures['width']}) f32, "
             f"{figures['params'] / 1e6:.1f}M parameters, batch {figures['batch']}; median of "
             f"{figures['rounds']} rounds x {figures['steps']} steps", "",
             "| what | median ms | best ms | gradients held MB |", "|---|---:|---:|---:|"]
    for name, v in r.items():
        lines.append(f"| {name} | {v['median_ms']:.1f} | {v['best_ms']:.1f} | {v['gradients_held_mb']:.0f} |")
    sib = r["RTModule + FusedAdam step_in_backward"]["median_ms"]
    lines.append("")
    for name in ("eager + torch AdamW fused=True", "eager + torch AdamW foreach=True", "RTModule + FusedAdam"):
        lines.append(f"step_in_backward speed-up over {name}: {r[name]['median_ms'] / sib:.2f}x")
    fb = r["RTModule forward + backward only"]["median_ms"]
    fused = r["RTModule + FusedAdam"]["median_ms"]
    lines.append(f"optimizer share of the RTModule step: FusedAdam {fused - fb:.1f} ms, "
                 f"step_in_backward {sib - fb:.1f} ms (step minus forward + backward alone)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=3072)
    parser.add_argument("--layers", type=int, default=13)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant and round")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    figures = run(args.width, args.layers, args.batch, args.rounds, args.steps)
    print(f"torch {torch.__version__}, {figures['torch_threads']} torch threads")
    print(markdown(figures))
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
