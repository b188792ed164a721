"""python -m trainrt.coverage [--task T1,T2] [--only NAMES] [--json FILE] [--markdown FILE] [--timeout S] [--log FILE] [--onnx]

Trains every architecture the installed transformers registers for the tasks, tiny, 3 steps in eager
and through RTModule with fallback disabled, and prints a row per architecture as it finishes, then
`N passed, M failed` overall and per task. --only takes model types (llama), class names
(LlamaForCausalLM) or task/type names (causal-lm/llama), comma-separated."""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from trainrt.coverage.architectures import TASKS, architectures
from trainrt.coverage.isolation import run_isolated
from trainrt.coverage.report import header, markdown_backlog, row, summary, write_json


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(prog="python -m trainrt.coverage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=",".join(TASKS), help="comma-separated, of %(default)s")
    parser.add_argument("--only", help="comma-separated model types, class names or task/type names")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per architecture (default %(default)s: Swin's capture takes 5 minutes)")
    parser.add_argument("--log", help="append the workers' output (warnings, tracebacks of crashes) here")
    parser.add_argument("--json")
    parser.add_argument("--markdown", help="write the backlog: every architecture that does not pass, with its reason")
    parser.add_argument("--onnx", action="store_true",
                        help="the export sweep instead (onnx_export.py): torch.onnx.export each architecture, run and "
                             "train the file in TrainRT against eager and onnxruntime")
    args = parser.parse_args(argv)

    tasks = [t.strip() for t in args.task.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"unknown task {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    only = {n.strip().lower() for n in args.only.split(",") if n.strip()} if args.only else None
    archs = architectures(tasks, only)
    if not archs:
        raise SystemExit("no architecture matches --only")

    import torch
    import transformers

    print(f"{len(archs)} architectures, transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    if args.onnx:
        return _export_sweep(archs)
    print(header(), flush=True)
    start = time.perf_counter()
    outcomes = []
    for outcome in run_isolated(archs, args.timeout, args.log):
        outcomes.append(outcome)
        print(row(outcome), flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    print("\n".join(summary(outcomes)))
    given = sys.argv[1:] if argv is None else list(argv)  # the backlog's header names the command as run
    meta = {"command": " ".join(["python -m trainrt.coverage", shlex.join(given)]).strip(),
            "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
    if args.json:
        write_json(args.json, outcomes, meta)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_backlog(outcomes, meta))
    return outcomes


def _export_sweep(archs) -> list:
    import warnings

    from trainrt.coverage.onnx_export import run_one, summary

    outcomes = []
    for arch in archs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = run_one(arch)
        outcomes.append(outcome)
        print(f"{outcome.name:<40} {outcome.status:<15} {outcome.detail}", flush=True)
    print("\n".join(summary(outcomes)))
    return outcomes


if __name__ == "__main__":
    main()

