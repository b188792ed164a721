"""Runs the ONNX backend node tests for every op TrainRT claims.

The node tests come from the installed `onnx` package. onnx >= 1.23 no longer ships their data files;
its loader (onnx.backend.test.loader.load_model_tests(kind="node")) generates the models and input/output
data in memory, which is what this runner uses.

A test belongs to an op when its model is that single op, or when it is the expanded (function body)
form of such a test. Tests of claimed ops either pass or are listed with a reason in the skip file;
the run fails on any other failure, and on a skip entry that now passes (so the list only shrinks).

    python -m trainrt.conformance [--skips FILE] [--json FILE] [--ops Add,MatMul] [-v]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time
import traceback

import numpy as np
from onnx import numpy_helper

import trainrt

DEFAULT_SKIPS = pathlib.Path(__file__).with_name("skips.txt")


def load_skips(path: pathlib.Path) -> dict[str, str]:
    """Parses `test_name  # reason` lines; blank lines and lines starting with '#' are ignored."""
    skips = {}
    if not path.exists():
        return skips
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        skips[name.strip()] = reason.strip() or "no reason given"
    return skips


def tested_op(case, op_of_test: dict[str, str]) -> str | None:
    """The op a node test is about: its single node, or the op of the test it expands."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        node = nodes[0]
        return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    return op_of_test.get(base) if base != case.name else None


def as_array(x) -> np.ndarray:
    """Test data arrives as numpy arrays or as TensorProtos (for types numpy lacks, e.g. bfloat16)."""
    return x if isinstance(x, np.ndarray) else numpy_helper.to_array(x) if hasattr(x, "data_type") else np.asarray(x)


def compare(expected: np.ndarray, actual: np.ndarray, rtol: float, atol: float) -> None:
    """Raises AssertionError with a readable reason when outputs differ (the ONNX runner's rule)."""
    expected = as_array(expected)
    if expected.dtype != actual.dtype:
        raise AssertionError(f"dtype {actual.dtype}, expected {expected.dtype}")
    if expected.shape != actual.shape:
        raise AssertionError(f"shape {actual.shape}, expected {expected.shape}")
    if expected.dtype == np.bool_ or np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(actual, expected)
    elif expected.dtype.kind == "V" or expected.dtype.itemsize == 2 and expected.dtype.kind != "f":
        # ml_dtypes bfloat16: compare in float32
        np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32), rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def run_case(case) -> str | None:
    """Returns None on success, else a one-line reason."""
    try:
        session = trainrt.Session(case.model.SerializeToString())
        for inputs, outputs in case.data_sets:
            arrays = [np.asarray(as_array(x), order="C") for x in inputs]
            actual = session.run(arrays)
            if len(actual) != len(outputs):
                return f"{len(actual)} outputs, expected {len(outputs)}"
            for i, (e, a) in enumerate(zip(outputs, actual)):
                try:
                    compare(e, a, case.rtol, case.atol)
                except AssertionError as err:
                    first = " ".join(str(err).split())[:300]
                    return f"output {i}: {first}"
    except trainrt.Error as err:
        return f"{type(err).__name__}: {err}"
    except Exception as err:  # noqa: BLE001  (a test must never take the runner down)
        return f"{type(err).__name__}: {err} @ {traceback.format_exc(limit=1).splitlines()[-1]}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainrt.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--skips", type=pathlib.Path, default=DEFAULT_SKIPS, help="skip file")
    parser.add_argument("--json", type=pathlib.Path, help="write per-test details to this file")
    parser.add_argument("--ops", help="comma-separated ops to run (default: every claimed op)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failure reason")
    args = parser.parse_args(argv)

    from onnx.backend.test.loader import load_model_tests

    claimed = {op if dom in ("", "ai.onnx") else f"{dom}::{op}" for dom, op in trainrt.supported_ops()}
    if args.ops:
        claimed &= set(args.ops.split(","))
    skips = load_skips(args.skips)
    cases = load_model_tests(kind="node")
    op_of_test = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}

    per_op: dict[str, dict[str, int]] = {}
    details = []
    failures = []
    start = time.perf_counter()
    for case in cases:
        op = tested_op(case, op_of_test)
        if op not in claimed:
            continue
        reason = run_case(case)
        row = per_op.setdefault(op, {"passed": 0, "failed": 0, "skipped": 0})
        if case.name in skips:
            status = "skipped" if reason else "unexpected-pass"
            if reason is None:
                failures.append((case.name, "passes but is listed in the skip file: remove it"))
                row["failed"] += 1
            else:
                row["skipped"] += 1
        elif reason is None:
            status = "passed"
            row["passed"] += 1
        else:
            status = "failed"
            row["failed"] += 1
            failures.append((case.name, reason))
        details.append({"test": case.name, "op": op, "status": status, "reason": reason})

    print(f"{'op':28} {'passed':>7} {'failed':>7} {'skipped':>8}")
    for op in sorted(per_op):
        r = per_op[op]
        print(f"{op:28} {r['passed']:7d} {r['failed']:7d} {r['skipped']:8d}")
    skipped = [(d["test"], skips[d["test"]]) for d in details if d["status"] == "skipped"]
    if skipped:
        print(f"\nSkipped ({len(skipped)}, listed in {args.skips}):")
        for name, why in skipped:
            print(f"  {name}: {why}")
    if failures:
        print(f"\nFailed ({len(failures)}):")
        for name, why in failures if args.verbose else failures[:50]:
            print(f"  {name}: {why}")
    if args.json:
        args.json.write_text(json.dumps({"tests": details, "per_op": per_op}, indent=1))
    passed = sum(r["passed"] for r in per_op.values())
    print(f"\nconformance: {len(per_op)} ops, {time.perf_counter() - start:.1f} s")
    print(f"{passed} passed, {len(failures)} failed, {len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
