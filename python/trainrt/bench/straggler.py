"""Straggler time of DDP steps on variable-length batches: torch's DistributedSampler against trainrt.data's
load-balancing samplers, at the same world size and batch size.

A DDP step ends when its slowest rank's backward does (the gradient all-reduce waits for it), so a step
costs the max over ranks of their compute, and max / mean is the part of it spent waiting (1.0: none).
Lengths are log-normal (a long tail, as in text and speech corpora), 1 to 512; each batch is padded to
its longest sample rounded up to a multiple of 8. The ranks' compute is measured in this one process:
each step runs every rank's batch in turn (forward + backward of a small token MLP in RTModule), each
batch timed as the fastest of --repeats runs (noise on a shared machine only adds), the two samplers'
steps interleaved; every batch shape runs once before timing, so the engine's planning of a new shape
is not counted. Beside it, the same ratio in padded tokens (batch x length: the cost model, noise-free).

    python -m trainrt.bench.straggler                        # 4 ranks, 2048 samples, batch 16
    python -m trainrt.bench.straggler --world-size 8 --samples 4096 --repeats 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from trainrt.data import LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler

_VOCAB, _CLASSES, _MAX_LENGTH = 1000, 8, 512


class _TokenMLP(nn.Module):
    """tokens (B, T), mask (B, T), labels (B,) -> loss; compute grows as B x T."""

    def __init__(self):
        super().__init__()
        self.embed, self.up, self.down = nn.Embedding(_VOCAB, 64), nn.Linear(64, 256), nn.Linear(256, 64)
        self.out = nn.Linear(64, _CLASSES)

    def forward(self, tokens, mask, labels):
        h = self.down(F.gelu(self.up(self.embed(tokens))))  # (B, T, 64)
        pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)  # (B, 64)
        return F.cross_entropy(self.out(pooled), labels)


def _chunks(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def _padded_length(batch: list[int], lengths: list[int]) -> int:
    return 8 * math.ceil(max(lengths[i] for i in batch) / 8)


def _steps(lengths: list[int], world_size: int, batch_size: int, seed: int) -> dict[str, list[list[list[int]]]]:
    """Per sampler: its steps, each a list of every rank's batch (dataset indices). The dataset's
    samples are their own lengths, the load-balancing sampler's complexity."""
    plain = [_chunks(list(DistributedSampler(lengths, world_size, r, shuffle=True, seed=seed)), batch_size)
             for r in range(world_size)]
    balanced = [list(LoadBalancingDistributedBatchSampler(
        LoadBalancingDistributedSampler(lengths, lambda n: n, world_size, r, seed=seed),
        lambda share: _chunks(share, batch_size))) for r in range(world_size)]
    return {"torch DistributedSampler": [list(s) for s in zip(*plain)],
            "trainrt LoadBalancingDistributedBatchSampler": [list(s) for s in zip(*balanced)]}


def _tensors(batch: list[int], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t = _padded_length(batch, lengths)
    mask = (torch.arange(t) < torch.tensor([lengths[i] for i in batch]).unsqueeze(1)).float()  # (B, T)
    return torch.randint(0, _VOCAB, (len(batch), t)), mask, torch.randint(0, _CLASSES, (len(batch),))


def _compute_s(model: nn.Module, batch, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        model(*batch).backward()
        best = min(best, time.perf_counter() - start)
    return best


def run(world_size: int = 4, samples: int = 2048, batch_size: int = 16, repeats: int = 3, seed: int = 0) -> dict:
    """Per sampler: steps, the median over steps of max / mean rank compute and of padded tokens, and the
    epoch's compute (sum over steps of the slowest rank) with the part of it that is waiting."""
    import trainrt

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(math.log(48), 0.9, samples), 1, _MAX_LENGTH).astype(int).tolist()
    steps = _steps(lengths, world_size, batch_size, seed)
    torch.manual_seed(seed)
    model = trainrt.RTModule(_TokenMLP())
    shapes = {(len(b), _padded_length(b, lengths)): b for runs in steps.values() for step in runs for b in step}
    for batch in shapes.values():  # untimed: each shape planned once
        model(*_tensors(batch, lengths)).backward()
    compute = {name: [] for name in steps}  # per sampler, per step: (world_size,) seconds
    for step in zip(*steps.values()):  # the samplers' step i side by side
        for name, batches in zip(steps, step):
            compute[name].append([_compute_s(model, _tensors(b, lengths), repeats) for b in batches])
    result = {"world_size": world_size, "samples": samples, "batch_size": batch_size, "repeats": repeats,
              "length_median": statistics.median(lengths), "length_max": max(lengths),
              "in_engine": model.fallback_reason is None, "samplers": {}}
    for name, runs in steps.items():
        tokens = [[len(b) * _padded_length(b, lengths) for b in step] for step in runs]
        result["samplers"][name] = {
            "steps": len(runs),
            "compute_max_over_mean": statistics.median(max(s) / statistics.mean(s) for s in compute[name]),
            "tokens_max_over_mean": statistics.median(max(s) / statistics.mean(s) for s in tokens),
            "epoch_s": sum(max(s) for s in compute[name]),
            "waiting_s": sum(max(s) - statistics.mean(s) for s in compute[name])}
    return result


def markdown(figures: dict) -> str:
    lines = [f"{figures['world_size']} ranks, {figures['samples']} samples (lengths log-normal, median "
             f"{figures['length_median']:.0f}, max {figures['length_max']}), batch {figures['batch_size']}, "
             f"fastest of {figures['repeats']} runs per batch\n",
             "| sampler | steps | rank compute max / mean (median step) | padded tokens max / mean (median step) "
             "| epoch compute, slowest rank per step (s) | of it waiting (s) |", "|---|---|---|---|---|---|"]
    for name, f in figures["samplers"].items():
        lines.append(f"| {name} | {f['steps']} | {f['compute_max_over_mean']:.3f} | {f['tokens_max_over_mean']:.3f} "
                     f"| {f['epoch_s']:.3f} | {f['waiting_s']:.3f} |")
    if not figures["in_engine"]:
        lines.append("\nRTModule fell back to PyTorch: the compute figures are not the engine's.")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m trainrt.bench.straggler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="runs per batch; its fastest is its compute")
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args(argv)
    figures = run(a.world_size, a.samples, a.batch_size, a.repeats, a.seed)
    print(markdown(figures))
    return figures


if __name__ == "__main__":
    main()
