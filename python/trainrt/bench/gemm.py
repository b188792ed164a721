"""GEMM micro-benchmark: the engine's matrix product (oneDNN, see docs/gemm.md) against torch.matmul on
the products the suite's models run, f32, in one process, interleaved shape by shape.

The engine side is a one-node ONNX MatMul run through trainrt.Session (the same kernel RTModule
runs; the session adds a few microseconds per call, small beside these products). The largest
shape's best rate is the suite's measured peak (the chosen GEMM library's best on this machine).

    python -m trainrt.bench.gemm [--rounds 5] [--tuned]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from onnx import TensorProto, helper

# (name, M, K, N): the forward products of the quick suite's models (tokens x in x out).
SHAPES = [
    ("mlp fc1", 256, 784, 2048),
    ("mlp fc2", 256, 2048, 2048),
    ("gpt2-mini qkv", 1024, 256, 768),
    ("gpt2-mini mlp up", 1024, 256, 1024),
    ("gpt2-mini mlp down", 1024, 1024, 256),
    ("gpt2-mini lm head", 1024, 256, 8192),
    ("llama-mini mlp up", 1024, 256, 688),
    ("llama-mini mlp down", 1024, 688, 256),
    ("llama-mini q, k, v, o", 1024, 256, 256),
    ("peak: square 2048", 2048, 2048, 2048),
]
PEAK_SHAPE = SHAPES[-1][0]


def _matmul_model(m: int, k: int, n: int) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()


def _seconds_per_call(fn, min_time: float) -> float:
    fn()
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < min_time or calls < 3:
        fn()
        calls += 1
    return elapsed / calls


def run(rounds: int = 5, min_time: float = 0.05) -> dict:
    """GFLOP/s per shape: median and best over rounds, engine and torch taking turns."""
    import trainrt

    results = {}
    for name, m, k, n in SHAPES:
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        session, ta, tb = trainrt.Session(_matmul_model(m, k, n)), torch.from_numpy(a), torch.from_numpy(b)
        runs = {"trainrt": lambda: session.run([a, b]), "torch.matmul": lambda: torch.matmul(ta, tb)}
        times = {who: [] for who in runs}
        for r in range(rounds):
            for who in list(runs)[r % 2:] + list(runs)[:r % 2]:
                times[who].append(_seconds_per_call(runs[who], min_time))
        flops = 2 * m * k * n
        results[name] = {"shape": [m, k, n]} | {
            who: {"gflops_median": flops / statistics.median(t) / 1e9, "gflops_best": flops / min(t) / 1e9}
            for who, t in times.items()}
    return {"rounds": rounds, "shapes": results, "peak_gflops": results[PEAK_SHAPE]["trainrt"]["gflops_best"]}


def markdown(figures: dict) -> str:
    lines = [f"GEMM f32 GFLOP/s (median / best of {figures['rounds']} rounds); measured peak "
             f"{figures['peak_gflops']:.0f} GFLOP/s (best on {PEAK_SHAPE})", "",
             "| product | M x K x N | trainrt | torch.matmul | trainrt / torch |", "|---|---|---:|---:|---:|"]
    for name, r in figures["shapes"].items():
        ours, theirs = r["trainrt"], r["torch.matmul"]
        lines.append(f"| {name} | {' x '.join(map(str, r['shape']))} | {ours['gflops_median']:.0f} / {ours['gflops_best']:.0f} "
                     f"| {theirs['gflops_median']:.0f} / {theirs['gflops_best']:.0f} "
                     f"| {ours['gflops_median'] / theirs['gflops_median']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tuned", action="store_true",
                        help="op tuning on (TRAINRT_ENABLE_TUNING): each product's split over the threads measured "
                             "at its first call, the fastest kept")
    args = parser.parse_args()
    if args.tuned:
        from trainrt import _C

        _C.set_tuning_options(True, 100.0, "")
    print(markdown(run(args.rounds)))


if __name__ == "__main__":
    main()
