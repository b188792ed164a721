"""Smoke test of the suite's `ddp` mode (`python -m trainrt.bench --modes ...,ddp`, trainrt/bench/ddp.py)
on the tiny model: 2 ranks spawned, every DDP mode in the engine (a fallback fails the run), and what
the gradients each backward holds. The timed figures are not judged (performance is measured by the benchmark,
never in timed unit tests)."""

import json

import pytest

from trainrt.bench.__main__ import main

pytestmark = pytest.mark.slow  # a 2-rank run


def test_ddp_mode_times_eager_and_rtmodule_ddp_and_reports_gradients_held(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")  # read by the spawned ranks too
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--models", "tiny", "--modes", "eager,ddp", "--steps", "1", "--warmup", "0", "--no-micro", "--no-trainer",
          "--no-sparsity", "--json", str(out_json), "--markdown", str(out_md)])
    results = json.loads(out_json.read_text())
    assert set(results["models"][0]["modes"]) == {"eager"}  # ddp is not an in-process mode
    (row,) = results["ddp"]
    assert row["model"] == "tiny"
    assert set(row["one_process"]) == {"eager", "rtmodule"}
    assert set(row["ddp"]) == set(row["gradients_held"]) == {"eager", "rtmodule", "rtmodule, at the end"}
    assert all(t > 0 for t in [*row["one_process"].values(), *row["ddp"].values()])
    # Every gradient is held at the end of each backward; eager's are torch's only, and without the
    # hand-over the engine holds them all at the end of its backward. (tiny's gradients are less than
    # one group: the hand-over gives them to torch after the engine's run too.)
    held = row["gradients_held"]
    assert all(h["peak_bytes"] == row["gradient_bytes"] for h in held.values()), held
    assert held["eager"]["engine_peak_bytes"] == 0
    assert held["rtmodule, at the end"]["engine_peak_bytes"] == row["gradient_bytes"]
    assert held["rtmodule"]["engine_peak_bytes"] <= row["gradient_bytes"]
    for text in (capsys.readouterr().out, out_md.read_text()):
        assert "| tiny |" in text and "DDP x2: eager ms" in text and "gradients held in the backward" in text
