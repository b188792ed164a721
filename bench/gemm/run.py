"""Builds gemm_bench.cc once per candidate library, times the candidates and torch.matmul interleaved
shape by shape, and prints markdown tables of GFLOP/s (the tables in docs/gemm.md come from here).

Each candidate (and torch) is one long-lived worker process that measures the shapes it is sent. For
every shape, the workers take turns in a rotating order, so a burst of load from other work on the
machine hits every candidate alike. Workers run at raised priority (nice -15 when run as root), and a
turn starts only once every worker's threads are idle (some thread runtimes spin after a call). Each
turn reports the median and the best time over its repeats; the tables show, per shape, the median
over rounds of the medians ("typical") and the best over rounds of the bests ("uncontended").
OpenBLAS runs as the machine is configured
(OPENBLAS_CORETYPE=Haswell, AVX2 kernels) and, in a separately labelled column, with that variable
unset for its worker only.

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
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_LIB = Path(sys.prefix) / "lib"
SITE = Path(sysconfig.get_paths()["purelib"])
DEB_LIB = Path("/usr/lib/x86_64-linux-gnu")
THREADS = 2
PEAK = {"f32": 430.0, "bf16": 870.0}  # GFLOP/s, both cores (docs/architecture.md)

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
    ("attn-QK^T-x32", "NT,128,128,64,32"),
    ("attn-PV-x32", "NN,128,64,128,32"),
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
    env: dict[str, str | None] = dataclasses.field(default_factory=dict)  # None unsets
    needs: Path | None = None  # library file that must exist


def candidates() -> list[Candidate]:
    deb_dnnl = DEB_LIB / "libdnnl.so.2"
    out = [
        Candidate("onednn-deb", "dnnl_deb", ["--backend", "dnnl"], needs=deb_dnnl),
        Candidate("onednn-deb passive", "dnnl_deb", ["--backend", "dnnl"], needs=deb_dnnl,
                  env={"OMP_WAIT_POLICY": "passive"}),
        Candidate("trainrt gemm_f32", "trainrt", ["--backend", "trainrt"], needs=deb_dnnl),
        Candidate("onednn-deb sgemm", "dnnl_deb", ["--backend", "dnnl_sgemm"], needs=deb_dnnl),
        Candidate("onednn-pypi sgemm", "dnnl_pypi", ["--backend", "dnnl_sgemm"], needs=VENV_LIB / "libdnnl.so.3"),
        Candidate("torch", "torch", []),
    ]
    openblas = [
        ("scipy-openblas32", SITE / "scipy_openblas32/lib/libscipy_openblas.so", "scipy_"),
        ("openblas-deb-pthread", DEB_LIB / "openblas-pthread/libopenblas.so.0", ""),
        ("openblas-deb-openmp", DEB_LIB / "openblas-openmp/libopenblas.so.0", ""),
    ]
    for name, lib, prefix in openblas:
        args = ["--backend", "cblas", "--lib", str(lib), "--prefix", prefix,
                "--threads-fn", prefix + "openblas_set_num_threads"]
        out.append(Candidate(name, "cblas", args, needs=lib))
        out.append(Candidate(name + " (no CORETYPE)", "cblas", args, needs=lib, env={"OPENBLAS_CORETYPE": None}))
    for variant in ("pthread", "openmp"):
        lib = DEB_LIB / f"blis-{variant}/libblis.so.4"
        out.append(Candidate(f"blis-deb-{variant}", "cblas",
                             ["--backend", "cblas", "--lib", str(lib), "--threads-fn", "bli_thread_set_num_threads"],
                             needs=lib))
    out.append(Candidate("onednn-deb bf16", "dnnl_deb", ["--backend", "dnnl", "--dtype", "bf16"], dtype="bf16",
                         needs=deb_dnnl))
    out.append(Candidate("trainrt gemm_bf16_f32", "trainrt", ["--backend", "trainrt", "--dtype", "bf16"], dtype="bf16",
                         needs=deb_dnnl))
    out.append(Candidate("torch bf16", "torch", [], dtype="bf16"))
    return out


def build(build_dir: Path, trainrt_build: Path) -> dict[str, Path]:
    """Compiles gemm_bench.cc per backend; returns the binaries that built."""
    src = REPO / "bench/gemm/gemm_bench.cc"
    build_dir.mkdir(parents=True, exist_ok=True)
    base = ["g++", "-O2", "-std=c++20", str(src)]
    trainrt_libs = [str(trainrt_build / f"libtrainrt_{layer}.a") for layer in ("kernels_cpu", "core")]
    recipes = {
        # TrainRT's gemm_f32 from an existing CMake build of the engine (its static libraries).
        "trainrt": base + ["-DGEMM_BENCH_TRAINRT", f"-I{REPO}/src", *trainrt_libs, "-ldnnl", "-lgomp",
                           "-lpthread", "-ldl"],
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


def torch_worker(dtype: str, min_time: float) -> None:
    """Times torch.matmul on the shapes read from stdin, printing the same JSON lines as gemm_bench."""
    import torch

    torch.set_num_threads(THREADS)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    for text in sys.stdin:
        text = text.strip()
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
        flop = 2 * batch * m * n * k
        print(json.dumps({"shape": text, "dtype": dtype, "ms": statistics.median(times),
                          "gflops": flop / (statistics.median(times) * 1e6), "best_gflops": flop / (min(times) * 1e6)}),
              flush=True)


class Worker:
    """One candidate's long-lived measuring process."""

    def __init__(self, c: Candidate, binaries: dict[str, Path], min_time: float, nice: int):
        env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS),
                   BLIS_NUM_THREADS=str(THREADS))
        for key, value in c.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        if c.binary == "torch":
            cmd = [sys.executable, __file__, "--torch-worker", c.dtype, "--min-time", str(min_time)]
        else:
            cmd = [str(binaries[c.binary]), *c.args, "--threads", str(THREADS), "--min-time", str(min_time)]
        self.stderr = tempfile.TemporaryFile(mode="w+")
        # Its own session, so with scheduler autogroups (Linux's default) the niceness applies
        # against the other sessions' work (compiles) and not only inside this session.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=env, start_new_session=True, preexec_fn=lambda: os.nice(nice))
        try:
            Path(f"/proc/{self.proc.pid}/autogroup").write_text(str(nice))
        except OSError:
            pass  # no autogroups: the plain niceness above is what counts

    def measure(self, shape: str) -> dict | None:
        if self.proc.poll() is not None:
            return None
        self.proc.stdin.write(shape + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def close(self) -> list[str]:
        """Ends the worker; returns its notable stderr lines (OpenBLAS core, errors)."""
        self.proc.stdin.close()
        self.proc.wait()
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().splitlines() if ln.startswith(("openblas core", "gemm_bench:"))]
        if self.proc.returncode:
            lines.append(f"exited with status {self.proc.returncode}")
        return sorted(set(lines))


def wait_for_idle(workers: list[Worker], max_wait: float) -> None:
    """Waits (up to max_wait seconds) until no thread of any worker is runnable: some thread
    runtimes keep spinning for a while after a call, which would steal the next worker's cores."""
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline and any(runnable_threads(w.proc.pid) for w in workers):
        time.sleep(0.05)


def runnable_threads(pid: int) -> int:
    count = 0
    for stat in Path(f"/proc/{pid}/task").glob("[0-9]*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited meanwhile
        count += state == "R"
    return count


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def markdown(cands: list[Candidate], shapes: list[tuple[str, str]], table: dict, title: str) -> str:
    """One table per dtype of table[candidate][shape] GFLOP/s with % of peak and a geometric mean."""
    lines = []
    for dtype, peak in PEAK.items():
        cs = [c for c in cands if c.dtype == dtype and table.get(c.name)]
        if not cs:
            continue
        lines.append(f"\n{dtype}, {title}: GFLOP/s (% of {peak:.0f} GFLOP/s peak), {THREADS} threads\n")
        lines.append("| shape | TRANS,M,N,K,B | " + " | ".join(c.name for c in cs) + " |")
        lines.append("|---|---|" + "---|" * len(cs))
        for label, s in shapes:
            cells = []
            for c in cs:
                g = table[c.name].get(s)
                cells.append("-" if g is None else f"{g:.0f} ({100 * g / peak:.0f}%)")
            lines.append(f"| {label} | {s} | " + " | ".join(cells) + " |")
        geo = []
        for c in cs:
            vals = [max(table[c.name][s], 0.01) for _, s in shapes if s in table[c.name]]
            geo.append(f"**{statistics.geometric_mean(vals):.0f}**" if vals else "-")
        lines.append("| geometric mean | | " + " | ".join(geo) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.15, help="seconds of timed runs per shape per turn")
    p.add_argument("--candidates", default="", help="comma-separated names (default: all)")
    p.add_argument("--shapes", default="", help="comma-separated shape labels (default: all)")
    p.add_argument("--idle-wait", type=float, default=2.0,
                   help="at most this many seconds before each turn for every worker's threads to go idle")
    p.add_argument("--nice", type=int, default=-15 if os.geteuid() == 0 else 0,
                   help="niceness increment of the workers (default -15 as root: compiles of other work on "
                        "the machine then take little of the measured cores)")
    p.add_argument("--build-dir", type=Path, default=REPO / "build/gemm/bench")
    p.add_argument("--trainrt-build", type=Path, default=REPO / "build/release",
                   help="CMake build of TrainRT whose libtrainrt_kernels_cpu.a / libtrainrt_core.a to time")
    p.add_argument("--out", type=Path, help="write raw per-round results as JSON here")
    p.add_argument("--torch-worker", metavar="DTYPE", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.torch_worker:
        torch_worker(args.torch_worker, args.min_time)
        return

    labels = set(filter(None, args.shapes.split(",")))
    shapes = [(label, s) for label, s in SHAPES if not labels or label in labels]
    names = set(filter(None, args.candidates.split(",")))
    binaries = build(args.build_dir, args.trainrt_build)
    cands = []
    for c in candidates():
        if names and c.name not in names:
            continue
        if (c.needs and not c.needs.exists()) or (c.binary != "torch" and c.binary not in binaries):
            print(f"note: skipping {c.name}: {c.needs} missing or binary not built", file=sys.stderr)
            continue
        cands.append(c)

    workers = {c.name: Worker(c, binaries, args.min_time, args.nice) for c in cands}
    raw = {c.name: {s: [] for _, s in shapes} for c in cands}
    notes: dict[str, list[str]] = {c.name: [] for c in cands}
    loads = []
    for rnd in range(args.rounds):
        loads.append(load())
        for i, (_, s) in enumerate(shapes):
            shift = (rnd + i) % len(cands)
            for c in cands[shift:] + cands[:shift]:
                wait_for_idle(list(workers.values()), args.idle_wait)
                row = workers[c.name].measure(s)
                if row is None:
                    continue
                raw[c.name][s].append((row["gflops"], row["best_gflops"]))
                if row.get("max_rel_err", 0) > (1e-2 if c.dtype == "bf16" else 1e-4):
                    notes[c.name].append(f"{s}: wrong result, max_rel_err {row['max_rel_err']}")
        print(f"round {rnd + 1}/{args.rounds} done, load {loads[-1]}", file=sys.stderr)
    loads.append(load())
    for c in cands:
        notes[c.name] += workers[c.name].close()

    typical = {n: {s: statistics.median(g for g, _ in v) for s, v in per.items() if v} for n, per in raw.items()}
    best = {n: {s: max(b for _, b in v) for s, v in per.items() if v} for n, per in raw.items()}
    with open("/proc/loadavg") as f:
        load_end = " ".join(f.read().split()[:3])
    print(f"{args.rounds} rounds, workers at nice {args.nice:+d}; 1-min load average at the start of each round and at the end: "
          f"{', '.join(loads)}; load averages (1, 5, 15 min) at the end: {load_end}.")
    print(markdown(cands, shapes, typical, "typical (median over rounds of each turn's median)"))
    print(markdown(cands, shapes, best, "uncontended (best over rounds of each turn's best run)"))
    for name, ns in notes.items():
        for n in ns:
            print(f"\n- {name}: `{n}`")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"raw": raw, "loads": loads, "notes": notes}, indent=1))


if __name__ == "__main__":
    main()
