"""Builds gemm_bench.cc once per candidate library, runs the candidates and torch.matmul interleaved,
and prints a markdown table of median GFLOP/s (the table in docs/gemm.md comes from here).

Each candidate (and torch) runs in its own process, round after round in a rotating order, so a
burst of load from other work on the machine hits every candidate alike; the table shows the median
over rounds of each process's median time. OpenBLAS runs as the machine is configured
(OPENBLAS_CORETYPE=Haswell, AVX2 kernels) and, in a separately labelled column, with that variable
unset for its process only.

    .venv/bin/python bench/gemm/run.py --rounds 5 --out build/gemm/bench/results.json
    .venv/bin/python bench/gemm/run.py --candidates onednn-deb,torch --shapes mlp-fc1-fwd

Needs g++ and, for the candidates measured, the Debian packages libdnnl-dev, libopenblas-pthread-dev,
libopenblas-openmp-dev, libblis-pthread-dev, libblis-openmp-dev and the PyPI packages in the venv
(scipy-openblas32, onednn-devel with tbb, intel-cmplr-lib-rt, intel-sycl-rt, torch). Candidates whose
library is missing are skipped with a note.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_LIB = Path(sys.prefix) / "lib"
SITE = Path(sysconfig.get_paths()["purelib"])
DEB_LIB = Path("/usr/lib/x86_64-linux-gnu")
THREADS = 2
PEAK_F32 = 430.0  # GFLOP/s, both cores (DESIGN.md)
PEAK_BF16 = 870.0

# (label, "TRANS,M,N,K,BATCH"): C(MxN) = op(A) op(B). NT is a Linear forward (X W^T), NN its input
# gradient (dY W), TN its weight gradient (dY^T X).
SHAPES = [
    ("mlp-fc1-fwd", "NT,256,2048,784,1"),
    ("mlp-fc2-fwd", "NT,256,2048,2048,1"),
    ("mlp-head-fwd", "NT,256,10,2048,1"),
    ("mlp-fc2-dX", "NN,256,2048,2048,1"),
    ("mlp-fc1-dX", "NN,256,784,2048,1"),
    ("mlp-fc2-dW", "TN,2048,2048,256,1"),
    ("mlp-fc1-dW", "TN,2048,784,256,1"),
    ("mlp-head-dW", "TN,10,2048,256,1"),
    ("bert-proj-fwd", "NT,1024,768,768,1"),
    ("bert-ffn-up-fwd", "NT,1024,3072,768,1"),
    ("bert-ffn-down-fwd", "NT,1024,768,3072,1"),
    ("bert-ffn-up-dX", "NN,1024,768,3072,1"),
    ("bert-ffn-up-dW", "TN,3072,768,1024,1"),
    ("bert-proj-dW", "TN,768,768,1024,1"),
    ("tall-256", "NN,2048,256,256,1"),
    ("vocab-8192-fwd", "NT,2048,8192,256,1"),
    ("vocab-8192-dX", "NN,2048,256,8192,1"),
    ("attn-QK^T x32", "NT,128,128,64,32"),
    ("attn-PV x32", "NN,128,64,128,32"),
    ("odd-127x255x129", "NN,127,255,129,1"),
    ("odd-1000x999x37", "NT,1000,999,37,1"),
    ("odd-511x513x257-TN", "TN,511,513,257,1"),
    ("vec-1x4096x1024", "NN,1,4096,1024,1"),
]


@dataclasses.dataclass
class Candidate:
    name: str
    binary: str  # key into the built binaries, or "torch"
    args: list[str]
    dtype: str = "f32"
    unset_coretype: bool = False
    needs: Path | None = None  # library file that must exist


def candidates() -> list[Candidate]:
    scipy_lib = SITE / "scipy_openblas32/lib/libscipy_openblas.so"
    out = [
        Candidate("onednn-deb", "dnnl_deb", ["--backend", "dnnl"], needs=DEB_LIB / "libdnnl.so.2"),
        Candidate("onednn-deb sgemm", "dnnl_deb", ["--backend", "dnnl_sgemm"], needs=DEB_LIB / "libdnnl.so.2"),
        Candidate("onednn-pypi sgemm", "dnnl_pypi", ["--backend", "dnnl_sgemm"], needs=VENV_LIB / "libdnnl.so.3"),
        Candidate("torch", "torch", []),
    ]
    openblas = [
        ("scipy-openblas32", scipy_lib, "scipy_"),
        ("openblas-deb-pthread", DEB_LIB / "openblas-pthread/libopenblas.so.0", ""),
        ("openblas-deb-openmp", DEB_LIB / "openblas-openmp/libopenblas.so.0", ""),
    ]
    for name, lib, prefix in openblas:
        args = ["--backend", "cblas", "--lib", str(lib), "--prefix", prefix,
                "--threads-fn", prefix + "openblas_set_num_threads"]
        out.append(Candidate(name, "cblas", args, needs=lib))
        out.append(Candidate(name + " (no CORETYPE)", "cblas", args, unset_coretype=True, needs=lib))
    for variant in ("pthread", "openmp"):
        lib = DEB_LIB / f"blis-{variant}/libblis.so.4"
        out.append(Candidate(f"blis-deb-{variant}", "cblas",
                             ["--backend", "cblas", "--lib", str(lib), "--threads-fn", "bli_thread_set_num_threads"],
                             needs=lib))
    out.append(Candidate("onednn-deb bf16", "dnnl_deb", ["--backend", "dnnl", "--dtype", "bf16"],
                         dtype="bf16", needs=DEB_LIB / "libdnnl.so.2"))
    out.append(Candidate("torch bf16", "torch", [], dtype="bf16"))
    return out


def build(build_dir: Path) -> dict[str, Path]:
    """Compiles gemm_bench.cc per backend; returns the binaries that built."""
    src = REPO / "bench/gemm/gemm_bench.cc"
    build_dir.mkdir(parents=True, exist_ok=True)
    base = ["g++", "-O2", "-std=c++20", str(src)]
    recipes = {
        "cblas": base + ["-ldl"],
        "dnnl_deb": base + ["-DGEMM_BENCH_DNNL", "-ldnnl", "-ldl"],
        # The PyPI build needs tbb / intel-cmplr-lib-rt / intel-sycl-rt from the same venv lib dir.
        "dnnl_pypi": base + ["-DGEMM_BENCH_DNNL", f"-I{sys.prefix}/include", f"-L{VENV_LIB}",
                             "-l:libdnnl.so.3", f"-Wl,--disable-new-dtags,-rpath,{VENV_LIB}", "-ldl"],
    }
    built = {}
    for name, cmd in recipes.items():
        exe = build_dir / f"gemm_bench_{name}"
        r = subprocess.run(cmd + ["-o", str(exe)], capture_output=True, text=True)
        if r.returncode == 0:
            built[name] = exe
        else:
            print(f"note: {name} did not build: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return built


def torch_worker(dtype: str, shapes: list[str], min_time: float) -> None:
    """Times torch.matmul on the shapes, printing the same JSON lines as gemm_bench."""
    import torch

    torch.set_num_threads(THREADS)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    for text in shapes:
        trans, m, n, k, batch = text.split(",")
        m, n, k, batch = int(m), int(n), int(k), int(batch)
        g = torch.Generator().manual_seed(42)
        lead = (batch,) if batch > 1 else ()
        a = torch.rand(*lead, *((k, m) if trans[0] == "T" else (m, k)), generator=g).to(dt)
        b = torch.rand(*lead, *((n, k) if trans[1] == "T" else (k, n)), generator=g).to(dt)
        a = a.transpose(-1, -2) if trans[0] == "T" else a
        b = b.transpose(-1, -2) if trans[1] == "T" else b
        out = torch.empty(*lead, m, n, dtype=dt)
        for _ in range(2):
            torch.matmul(a, b, out=out)
        times = []
        start = time.perf_counter()
        while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < 200):
            t0 = time.perf_counter()
            torch.matmul(a, b, out=out)
            times.append((time.perf_counter() - t0) * 1e3)
        ms = statistics.median(times)
        print(json.dumps({"shape": text, "dtype": dtype, "ms": ms, "gflops": 2 * batch * m * n * k / (ms * 1e6)}),
              flush=True)


def run_candidate(c: Candidate, binaries: dict[str, Path], shapes: list[str], min_time: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS),
               BLIS_NUM_THREADS=str(THREADS))
    if c.unset_coretype:
        env.pop("OPENBLAS_CORETYPE", None)
    if c.binary == "torch":
        cmd = [sys.executable, __file__, "--torch-worker", c.dtype, "--min-time", str(min_time), "--shapes",
               ",".join(label for label, s in SHAPES if s in shapes)]
    else:
        cmd = [str(binaries[c.binary]), *c.args, "--threads", str(THREADS), "--min-time", str(min_time)]
        for s in shapes:
            cmd += ["--shape", s]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    results = {}
    for line in r.stdout.splitlines():
        row = json.loads(line)
        results[row["shape"]] = row
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith(("openblas core", "gemm_bench:"))]
    return {"results": results, "notes": sorted(set(notes)), "rc": r.returncode}


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def wait_for_quiet(max_wait: float) -> None:
    """Waits (up to max_wait seconds) until no other task is runnable, so a compile running on the
    shared cores does not land in the middle of a measurement."""
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        with open("/proc/loadavg") as f:
            runnable = int(f.read().split()[3].split("/")[0])
        if runnable <= 1:  # this reader itself
            return
        time.sleep(0.5)


def markdown(cands: list[Candidate], shapes: list[tuple[str, str]], medians: dict, notes: dict) -> str:
    lines = []
    for dtype, peak in (("f32", PEAK_F32), ("bf16", PEAK_BF16)):
        cs = [c for c in cands if c.dtype == dtype and medians.get(c.name)]
        if not cs:
            continue
        lines.append(f"\n{dtype}: GFLOP/s (% of {peak:.0f} GFLOP/s peak), median over rounds, {THREADS} threads\n")
        lines.append("| shape | TRANS,M,N,K,B | " + " | ".join(c.name for c in cs) + " |")
        lines.append("|---|---|" + "---|" * len(cs))
        for label, s in shapes:
            cells = []
            for c in cs:
                g = medians[c.name].get(s)
                cells.append("-" if g is None else f"{g:.0f} ({100 * g / peak:.0f}%)")
            lines.append(f"| {label} | {s} | " + " | ".join(cells) + " |")
        geo = []
        for c in cs:
            vals = [medians[c.name][s] for _, s in shapes if medians[c.name].get(s)]
            geo.append(f"**{statistics.geometric_mean(vals):.0f}**" if vals else "-")
        lines.append("| geometric mean | | " + " | ".join(geo) + " |")
    for name, ns in notes.items():
        for n in ns:
            lines.append(f"\n- {name}: `{n}`")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.15, help="seconds of timed runs per shape per process")
    p.add_argument("--candidates", default="", help="comma-separated names (default: all)")
    p.add_argument("--shapes", default="", help="comma-separated shape labels (default: all)")
    p.add_argument("--build-dir", type=Path, default=REPO / "build/gemm/bench")
    p.add_argument("--quiet-wait", type=float, default=30.0,
                   help="seconds to wait, before each process, for other runnable tasks to finish")
    p.add_argument("--out", type=Path, help="write raw per-round results as JSON here")
    p.add_argument("--torch-worker", metavar="DTYPE", help=argparse.SUPPRESS)
    args = p.parse_args()

    labels = set(filter(None, args.shapes.split(",")))
    shapes = [(label, s) for label, s in SHAPES if not labels or label in labels]
    if args.torch_worker:
        torch_worker(args.torch_worker, [s for _, s in shapes], args.min_time)
        return

    names = set(filter(None, args.candidates.split(",")))
    binaries = build(args.build_dir)
    cands = []
    for c in candidates():
        if names and c.name not in names:
            continue
        if (c.needs and not c.needs.exists()) or (c.binary != "torch" and c.binary not in binaries):
            print(f"note: skipping {c.name}: {c.needs} missing or binary not built", file=sys.stderr)
            continue
        cands.append(c)

    shape_texts = [s for _, s in shapes]
    raw = {c.name: {s: [] for s in shape_texts} for c in cands}
    notes: dict[str, list[str]] = {}
    loads = []
    for rnd in range(args.rounds):
        order = cands[rnd % len(cands):] + cands[:rnd % len(cands)]
        loads.append(load())
        for c in order:
            wait_for_quiet(args.quiet_wait)
            r = run_candidate(c, binaries, shape_texts, args.min_time)
            notes[c.name] = r["notes"] or notes.get(c.name, [])
            for s, row in r["results"].items():
                raw[c.name][s].append(row["gflops"])
                if row.get("max_rel_err", 0) > (1e-2 if c.dtype == "bf16" else 1e-4):
                    notes.setdefault(c.name, []).append(f"{s}: wrong result, max_rel_err {row['max_rel_err']}")
        print(f"round {rnd + 1}/{args.rounds} done, load {loads[-1]}", file=sys.stderr)
    loads.append(load())

    medians = {name: {s: statistics.median(v) for s, v in per.items() if v} for name, per in raw.items()}
    with open("/proc/loadavg") as f:
        uptime_load = " ".join(f.read().split()[:3])
    print(f"Load (1-min average) at the start of each round and at the end: {', '.join(loads)}; "
          f"load averages at the end: {uptime_load}.")
    print(markdown(cands, shapes, medians, notes))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"raw": raw, "loads": loads, "notes": notes}, indent=1))


if __name__ == "__main__":
    main()
