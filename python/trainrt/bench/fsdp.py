"""FSDP2 with RTModule on 2 ranks: memory per rank against DDP, step time against plain FSDP2.

    python -m trainrt.bench.fsdp                     # GPT 8 x 512, vocab 16384 (34M parameters), 5 timed steps
    python -m trainrt.bench.fsdp --layers 2 --width 64 --vocab 512 --steps 2     # a quick look

Each mode trains in 2 ranks of its own (spawned processes, gloo on loopback, one thread each: 2 ranks
share this machine's 2 cores), AdamW, each rank on its half of the same global batches:
- ddp: DistributedDataParallel(RTModule(model)): every rank holds all parameters, gradients and
  optimizer state;
- fsdp: plain FSDP2, fully_shard on each block and on the root, eager;
- shard-then-wrap: the same sharding, then RTModule around the model (one engine graph);
- wrap-then-shard: RTModule around each block, then fully_shard on each and on the root.
Per rank (rank 0's; both hold the same): the bytes of its parameters, of its gradients after the
backward and of its optimizer state (local shards under FSDP); the most tensor bytes live at once in
a step (one more step after the timed ones, measured as trainrt.bench.tensor_memory measures: torch's
allocations from the profiler, the engine's from its own counters, plus the parameters, optimizer
state and engine storage held from the step before); the process's peak RSS (the capture's
transient memory included: torch.export and the engine build at the first step); and the median
step time, the slowest rank's (an all-reduce of the max).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainrt.bench.rss import status_kib
from trainrt.bench.tensor_memory import step_tensor_bytes
from trainrt.testing import run_on_ranks

MODES = ("ddp", "fsdp", "shard-then-wrap", "wrap-then-shard")


def _build(mode: str, model: torch.nn.Module) -> torch.nn.Module:
    import trainrt
    from torch.distributed.fsdp import fully_shard

    if mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(trainrt.RTModule(model))
    for i, block in enumerate(model.blocks):
        if mode == "wrap-then-shard":
            model.blocks[i] = trainrt.RTModule(block)
        fully_shard(model.blocks[i])
    fully_shard(model)
    return trainrt.RTModule(model) if mode == "shard-then-wrap" else model


def _local_bytes(tensors) -> int:
    """Bytes of these tensors on this rank (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


class _Training:
    """One mode's model and optimizer; step(args) is one training step (what tensor_memory measures)."""

    def __init__(self, model, inner, optimizer):
        self.model, self.inner, self.optimizer = model, inner, optimizer
        self.gradient_bytes = 0

    def step(self, args) -> None:
        self.model(*args).backward()
        self.gradient_bytes = _local_bytes(p.grad for p in self.inner.parameters() if p.grad is not None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _rank_main(rank: int, world_size: int, mode: str, config: dict, warmup: int, steps: int) -> dict:
    from trainrt import _C
    from trainrt.bench.models import GPT

    torch.manual_seed(0)
    batch, seq, vocab = config.pop("batch"), config["seq"], config["vocab"]
    engine_before = _C.storage_bytes()["live"]
    inner = GPT(**config)
    training = _Training(_build(mode, inner), inner, None)
    training.optimizer = torch.optim.AdamW(training.model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)  # each rank its half: the data's values do not matter here

    def half_batch():
        data = torch.randint(0, vocab, (batch // world_size, seq + 1), generator=g)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()

    times = []
    for step in range(warmup + steps):
        args = half_batch()
        torch.distributed.barrier()
        start = time.perf_counter()
        training.step(args)
        elapsed = torch.tensor(time.perf_counter() - start)
        torch.distributed.all_reduce(elapsed, op=torch.distributed.ReduceOp.MAX)
        if step >= warmup:
            times.append(elapsed.item())
    figures = {"gradients": training.gradient_bytes, "parameters": _local_bytes(inner.parameters()),
               "optimizer_state": _local_bytes(t for s in training.optimizer.state.values() for t in s.values()
                                               if isinstance(t, torch.Tensor) and t.dim() > 0)}
    engine_held = _C.storage_bytes()["live"] - engine_before
    step_peak = step_tensor_bytes(training, half_batch(), engine_held)["peak_tensor_bytes"]
    figures["peak_tensors"] = figures["parameters"] + figures["optimizer_state"] + step_peak
    figures["peak_rss"] = status_kib("VmHWM") * 1024
    figures["step_s"] = statistics.median(times)
    return figures


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m trainrt.bench.fsdp", description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="global batch (sequences), half on each rank")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES), help="among: " + ",".join(MODES))
    args = parser.parse_args(argv)
    config = dict(vocab=args.vocab, dim=args.width, heads=max(1, args.width // 64), seq=args.seq,
                  layers=args.layers, batch=args.batch)
    modes = [m.strip() for m in args.modes.split(",")]
    results = {m: run_on_ranks(_rank_main, m, dict(config), args.warmup, args.steps, timeout=3600)[0] for m in modes}
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    plain = results.get("fsdp", {}).get("step_s")
    print(f"GPT {args.layers} x {args.width}, vocab {args.vocab}, sequence {args.seq}, global batch {args.batch}; "
          "MiB per rank")
    print("| mode | parameters | gradients | optimizer state | sum | peak tensors in a step | peak RSS | step ms "
          "| vs plain FSDP2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, f in results.items():
        total = f["parameters"] + f["gradients"] + f["optimizer_state"]
        ratio = f"{f['step_s'] / plain:.2f}" if plain else "-"
        print(f"| {mode} | {mib(f['parameters'])} | {mib(f['gradients'])} | {mib(f['optimizer_state'])} | {mib(total)} "
              f"| {mib(f['peak_tensors'])} | {mib(f['peak_rss'])} | {f['step_s'] * 1e3:.0f} | {ratio} |")
    return results


if __name__ == "__main__":
    main()
