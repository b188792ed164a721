"""python -m trainrt.bench [--suite quick|full] [--models a,b] [--modes a,b] [--steps N] [--warmup N]
                        [--no-micro] [--no-trainer] [--no-sparsity] [--json FILE] [--markdown FILE] [--plot FILE.png]
                        [--profile DIR] [--peers FILE]

Micro-benchmarks run first (GEMM against torch.matmul on the models' products, the optimizer step
against the copy bandwidth); the GEMM's best rate on a large square product is the measured peak
that "% peak" refers to, unless --peak-gflops names one. The models follow, then the `trainer` entry:
transformers.Trainer's steps/s with the eager model against trainrt.hf.RTTrainer on bert-mini sequence
classification (trainer.py), and the `sparsity` entry: label sparsity and padding elimination on against
off, beside eager, on a masked LM and a padded causal LM (sparsity.py). When `make bench-peers` has written its results
(build/bench-peers/peers.json, or --peers FILE), TrainRT's ratio to ORTModule and to ORT's on-device
training API follows, with TrainingSession timed on the peers' ONNX files (peer_report.py).

The `ddp` mode (on request: --modes eager,rtmodule,ddp) spawns 2 ranks per model and times DDP x2
against one process on the same global batch, eager beside RTModule (with gradients handed over as
they become final, and at the end of the engine's backward), and what each one's backward holds
(ddp.py)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch

from trainrt.bench.measure import run_model
from trainrt.bench.models import MODELS, SUITES
from trainrt.bench.modes import DDP_MODE, DEFAULT_MODES, MODES
from trainrt.bench.report import markdown_table, text_table, write_json

# Steps per suite: (warm-up, timed). The quick suite stays under 10 minutes on the 2-core dev machine.
_STEPS = {"quick": (3, 20), "full": (5, 30)}
# The two cores' nominal f32 peak (docs/architecture.md), used when the micro-benchmarks are skipped.
_NOMINAL_PEAK_GFLOPS = 430.0
# Rounds of the micro-benchmarks per suite: (GEMM, optimizer step, step_in_backward's 124M-parameter
# training step: (rounds, timed steps per round)).
_MICRO_ROUNDS = {"quick": (3, 5, (2, 3)), "full": (5, 10, (3, 5))}
# The trainer entry per suite: (rounds, warm-up steps, timed steps) per variant and round.
_TRAINER_ROUNDS = {"quick": (2, 2, 8), "full": (3, 2, 15)}
# The sparsity entry per suite: (rounds, timed steps) per mode and round.
_SPARSITY_ROUNDS = {"quick": (2, 5), "full": (3, 10)}


def _names(text: str, known: list[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m trainrt.bench", description=__doc__)
    parser.add_argument("--suite", choices=sorted(SUITES), default="quick")
    parser.add_argument("--models", help="comma-separated; default: the suite's models")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"comma-separated, of {', '.join([*MODES, DDP_MODE])}; default: %(default)s")
    parser.add_argument("--steps", type=int, help="timed steps per mode (default: 20 quick, 30 full)")
    parser.add_argument("--warmup", type=int, help="untimed steps after the first (default: 3 quick, 5 full)")
    parser.add_argument("--peak-gflops", type=float, help="the machine's peak for %% of peak (default: measured)")
    parser.add_argument("--no-micro", action="store_true", help="skip the GEMM and optimizer micro-benchmarks")
    parser.add_argument("--no-trainer", action="store_true", help="skip the transformers.Trainer entry")
    parser.add_argument("--no-sparsity", action="store_true", help="skip the sparsity entry (label sparsity, padding elimination)")
    parser.add_argument("--profile", metavar="DIR", help="also write Chrome traces of RTModule steps and print the top ops")
    parser.add_argument("--plot", metavar="FILE.png", help="bar chart of the ratios to eager")
    parser.add_argument("--peers", metavar="FILE", help="make bench-peers' results (default: %s, when present)"
                        % "build/bench-peers/peers.json")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)

    models = _names(args.models, list(MODELS), "model") if args.models else SUITES[args.suite]
    modes = _names(args.modes, [*MODES, DDP_MODE], "mode")
    warmup, steps = _STEPS[args.suite]
    warmup = warmup if args.warmup is None else args.warmup
    steps = steps if args.steps is None else args.steps

    # torch.compile's first step is timed cold: inductor's on-disk caches start empty, unless the
    # environment names a cache directory on purpose.
    # RTModule's likewise: its export cache starts empty (cache cold), and a fresh process then times
    # the first step again with the entries the first filled in (cache warm, first_step.py).
    cold = {}
    for variable, prefix in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRAINRT_CACHE_DIR", "export")):
        if variable not in os.environ:
            cold[variable] = tempfile.TemporaryDirectory(prefix=f"trainrt-bench-{prefix}-")
            os.environ[variable] = cold[variable].name
    caches = {v: "cold" if v in cold else os.environ[v] for v in ("TORCHINDUCTOR_CACHE_DIR", "TRAINRT_CACHE_DIR")}
    try:
        return _run(args, models, modes, warmup, steps, caches["TORCHINDUCTOR_CACHE_DIR"], caches["TRAINRT_CACHE_DIR"])
    finally:
        for variable, directory in cold.items():
            del os.environ[variable]
            directory.cleanup()


def _run(args, models: list[str], modes: list[str], warmup: int, steps: int, inductor_cache: str,
         export_cache: str) -> dict:
    micro, peak_gflops = {}, args.peak_gflops
    if not args.no_micro:
        from trainrt.bench import gemm, optimizer_step, python_op, step_in_backward

        gemm_rounds, optimizer_rounds, (sib_rounds, sib_steps) = _MICRO_ROUNDS[args.suite]
        print("[bench] micro-benchmarks: GEMM, optimizer step, step in backward, autograd.Function call",
              file=sys.stderr, flush=True)
        micro = {"gemm": gemm.run(gemm_rounds), "optimizer": optimizer_step.run(optimizer_rounds),
                 "step_in_backward": step_in_backward.run(rounds=sib_rounds, steps=sib_steps),
                 "python_op": python_op.run(rounds=optimizer_rounds)}
        print(gemm.markdown(micro["gemm"]) + "\n\n" + optimizer_step.markdown(micro["optimizer"]) + "\n\n" +
              step_in_backward.markdown(micro["step_in_backward"]) + "\n\n" + python_op.markdown(micro["python_op"]) + "\n")
        peak_gflops = peak_gflops or micro["gemm"]["peak_gflops"]
    peak_gflops = peak_gflops or _NOMINAL_PEAK_GFLOPS
    results = {"suite": args.suite, "steps": steps, "warmup": warmup, "modes": modes, "models": [], "micro": micro,
               "machine": {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                           "cpus": os.cpu_count(), "peak_gflops": peak_gflops,
                           "peak_source": "--peak-gflops" if args.peak_gflops else "measured GEMM best" if micro else "nominal",
                           "inductor_cache": inductor_cache, "export_cache": export_cache}}
    in_process = [m for m in modes if m != DDP_MODE]
    for name in models if in_process else []:
        print(f"[bench] {name}: {', '.join(in_process)}", file=sys.stderr, flush=True)
        results["models"].append(run_model(MODELS[name](), in_process, warmup, steps, peak_gflops * 1e9))
    if DDP_MODE in modes:
        from trainrt.bench import ddp

        print(f"[bench] ddp: 2 ranks, eager and RTModule DDP, then one process: {', '.join(models)}",
              file=sys.stderr, flush=True)
        results["ddp"] = [ddp.run(name, warmup, steps) for name in models]
    if not args.no_trainer:
        from trainrt.bench import trainer

        rounds, trainer_warmup, trainer_steps = _TRAINER_ROUNDS[args.suite]
        print("[bench] trainer: transformers.Trainer + eager, Trainer(RTModule), RTTrainer", file=sys.stderr, flush=True)
        results["trainer"] = trainer.run(rounds=rounds, warmup=trainer_warmup, steps=trainer_steps)
    if not args.no_sparsity:
        from trainrt.bench import sparsity

        rounds, sparsity_steps = _SPARSITY_ROUNDS[args.suite]
        print("[bench] sparsity: label sparsity and padding elimination on / off, eager", file=sys.stderr, flush=True)
        results["sparsity"] = sparsity.run(rounds=rounds, steps=sparsity_steps)
    from trainrt.bench import peer_report

    peers = peer_report.load(args.peers)
    if peers is not None:
        print("[bench] peers: ORTModule and ORT on-device training (make bench-peers), TrainingSession on their ONNX",
              file=sys.stderr, flush=True)
        results["peers"] = peer_report.run(peers, results)

    print(text_table(results))
    if "ddp" in results:
        from trainrt.bench import ddp

        print("\n" + ddp.markdown(results["ddp"]))
    if "trainer" in results:
        from trainrt.bench import trainer

        print("\n" + trainer.markdown(results["trainer"]))
    if "sparsity" in results:
        from trainrt.bench import sparsity

        print("\n" + sparsity.markdown(results["sparsity"]))
    if "peers" in results:
        print("\n" + peer_report.markdown(results["peers"]))
    if args.profile:
        from trainrt.bench.profile import profile_model

        for name in models:
            print(profile_model(MODELS[name](), args.profile))
    if args.json:
        write_json(results, args.json)
    if args.plot:
        from trainrt.bench.chart import write_chart

        write_chart(results, args.plot)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_table(results))
            if "peers" in results:
                f.write("\n\n" + peer_report.markdown(results["peers"]) + "\n")
    return results


if __name__ == "__main__":
    main()
