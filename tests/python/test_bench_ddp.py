"""Smoke test of the suite's `ddp` mode (`python -m trainrt.bench --modes ...,ddp`, trainrt/bench/ddp.py)
on the tiny model: 2 ranks spawned, every DDP mode in the engine (a fallback fails the run), and what
each backward holds. The timed figures are not judged (performance is measured by the benchmark,
never in timed unit tests)."""

import json

import pytest

from trainrt.bench.__main__ import main

pytestmark = pytest.mark.slow  # a 2-rank run


def test_ddp_mode_times_eager_and_rtmodule_ddp_and_reports_backward_bytes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")  # read by the spawned ranks too
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--models", "tiny", "--modes", "eager,ddp", "--steps", "1", "--warmup", "0", "--no-micro", "--no-trainer",
          "--no-sparsity", "--json", str(out_json), "--markdown", str(out_md)])
    results = json.loads(out_json.read_text())
    assert set(results["models"][0]["modes"]) == {"eager"}  # ddp is not an in-process mode
    (row,) = results["ddp"]
    assert row["model"] == "tiny"
    assert set(row["one_process"]) == {"eager", "rtmodule"}
    assert set(row["ddp"]) == set(row["backward"]) == {"eager", "rtmodule", "rtmodule, at the end"}
    assert all(t > 0 for t in [*row["one_process"].values(), *row["ddp"].values()])
    # Eager's backward allocates its gradients from torch; the engine's storage is not touched.
    assert row["backward"]["eager"]["torch_bytes"] >= row["gradient_bytes"]
    assert row["backward"]["eager"]["engine_bytes"] == 0
    assert all(b["torch_bytes"] >= 0 and b["engine_bytes"] >= 0 for b in row["backward"].values())
    for text in (capsys.readouterr().out, out_md.read_text()):
        assert "| tiny |" in text and "DDP x2: eager ms" in text and "backward +MiB" in text
