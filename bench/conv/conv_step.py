"""Forward + backward time of one convolution through trainrt.RTModule against torch eager.

Default: a ResNet-style 3x3 conv, batch 64, 64 -> 64 channels, 32x32, padding 1. Times y = conv(x)
then y.backward(dy) (input, weight and bias gradients), alternating the two so machine load hits
both alike; prints the median and best of each. Numbers on a shared machine are noisy.

    python bench/conv/conv_step.py [--batch 64] [--channels 64] [--size 32] [--repeats 10]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn as nn

import trainrt


def step_time(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> float:
    x = x.clone().requires_grad_()
    start = time.perf_counter()
    module(x).backward(dy)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    eager = nn.Conv2d(args.channels, args.channels, 3, padding=1)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(args.batch, args.channels, args.size, args.size)
    dy = torch.randn(args.batch, args.channels, args.size, args.size)
    times: dict[str, list[float]] = {"torch": [], "trainrt": []}
    for i in range(args.repeats + 2):  # 2 warm-up rounds: capture, planning, primitive creation
        for name, module in (("torch", eager), ("trainrt", ours)):
            t = step_time(module, x, dy)
            if i >= 2:
                times[name].append(t)
    flops = 3 * 2 * args.batch * args.channels * args.channels * 9 * args.size * args.size
    print(f"conv 3x3 {args.channels}->{args.channels}, batch {args.batch}, {args.size}x{args.size}, "
          f"torch threads {torch.get_num_threads()}: forward + backward")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:8} median {med * 1e3:7.1f} ms  best {min(ts) * 1e3:7.1f} ms  "
              f"({flops / med / 1e9:.0f} GFLOP/s at the median)")


if __name__ == "__main__":
    main()
