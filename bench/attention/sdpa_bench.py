"""Forward + backward time and peak memory of scaled dot product attention: torch's F.sdpa, the engine's
fused ScaledDotProductAttention (RTModule over F.sdpa), and the engine running the math spelled out
(softmax(q k^T * scale) v as MatMul / Softmax, the translation before the fused op).

    PYTHONPATH=python python bench/attention/sdpa_bench.py 8,4,128,64 1,4,2048,64

Each (shape, variant) runs in a fresh process. Time: median of the timed steps. Memory: the largest
resident set seen (sampled every 0.5 ms) during the timed steps, less the resident set before them,
so it counts what one step allocates beyond its inputs (the engine's arena is reserved in warm-up
and counted as resident before, so it is reported from memory_stats too).
"""

import json
import os
import subprocess
import sys
import threading
import time

VARIANTS = ("torch", "fused", "math")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(shape, variant, steps, causal):
    import torch
    import torch.nn.functional as F

    import trainrt

    class Fused(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    class Math(torch.nn.Module):
        def forward(self, q, k, v):
            scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
            if causal:
                length = q.shape[-2]
                scores = scores + torch.full((length, length), float("-inf")).triu(1)
            return torch.softmax(scores, dim=-1) @ v

    torch.manual_seed(0)
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    model = {"torch": Fused(), "fused": trainrt.RTModule(Fused()), "math": trainrt.RTModule(Math())}[variant]
    d_out = torch.randn(*shape)

    def step():
        model(q, k, v).backward(d_out)
        for t in (q, k, v):
            t.grad = None

    for _ in range(2):
        step()
    if variant != "torch":
        assert model._fallback_reason is None, model._fallback_reason
    before = rss_bytes()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    done.set()
    sampler.join()
    times.sort()
    result = {"ms": times[len(times) // 2] * 1e3, "peak_mib": (peak[0] - before) / 2**20}
    if variant != "torch":
        engine = next(iter(model._engines.values()))
        stats = engine.programs.memory_stats()
        result["arena_mib"] = max(stats["forward"]["planned_arena_bytes"], stats["backward"]["planned_arena_bytes"]) / 2**20
    return result


def main():
    if sys.argv[1] == "--one":
        shape = tuple(int(x) for x in sys.argv[2].split(","))
        print(json.dumps(measure(shape, sys.argv[3], int(sys.argv[4]), sys.argv[5] == "causal")))
        return
    for arg in sys.argv[1:]:
        shape = tuple(int(x) for x in arg.split(","))
        steps = 20 if shape[-2] <= 512 else 5
        for causal in ("full", "causal"):
            for variant in VARIANTS:
                out = subprocess.run([sys.executable, __file__, "--one", arg, variant, str(steps), causal],
                                     capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
                r = json.loads(out)
                extra = f", engine arena {r['arena_mib']:.1f} MiB" if "arena_mib" in r else ""
                print(f"{arg:>14} {causal:>6} {variant:>5}: {r['ms']:8.2f} ms fwd+bwd, "
                      f"peak +{r['peak_mib']:.1f} MiB{extra}", flush=True)


if __name__ == "__main__":
    main()
