"""Op tuning from RTModule (TRAINRT_ENABLE_TUNING, src/trainrt/kernels/cpu/op_tuning.h).

A model trained with tuning on measures its matrix products once, writes the results file, and
trains as eager does; a second process with tuning off reads the file and measures nothing (its
choices are the file's); ORTModule's variable names work.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent("""
    import json, torch, trainrt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 320), torch.nn.ReLU(), torch.nn.Linear(320, 10))
    eager = [p.detach().clone() for p in model.parameters()]
    rt = trainrt.RTModule(model)
    x, y = torch.randn(160, 48), torch.randint(0, 10, (160,))
    loss = torch.nn.functional.cross_entropy(rt(x), y)
    loss.backward()
    ref = torch.nn.Sequential(torch.nn.Linear(48, 320), torch.nn.ReLU(), torch.nn.Linear(320, 10))
    with torch.no_grad():
        for p, q in zip(ref.parameters(), eager):
            p.copy_(q)
    ref_loss = torch.nn.functional.cross_entropy(ref(x), y)
    ref_loss.backward()
    worst = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item()
                for p, q in zip(model.parameters(), ref.parameters()))
    print(json.dumps({"loss": loss.item(), "eager_loss": ref_loss.item(), "worst_grad": worst}))
""")


def _child(env_extra: dict) -> dict:
    env = {k: v for k, v in {**os.environ, "TRAINRT_FALLBACK_POLICY": "FALLBACK_DISABLE", **env_extra}.items()
           if v is not None}
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def test_tuning_writes_the_results_and_a_second_run_reads_them(tmp_path):
    results = tmp_path / "tuning.json"
    first = _child({"ORTMODULE_ENABLE_TUNING": "1", "ORTMODULE_TUNING_RESULTS_PATH": str(results),
                    "TRAINRT_MAX_TUNING_DURATION_MS": "50"})
    assert first["loss"] == pytest.approx(first["eager_loss"], rel=1e-5) and first["worst_grad"] < 1e-4
    written = json.loads(results.read_text())
    assert written["format"] == "trainrt-tuning 1" and written["cpu"]
    gemms = {k: v for k, v in written["choices"].items() if k.startswith("gemm f32")}
    assert any("m=160" in k for k in gemms), list(gemms)  # the forward's products, on their real shapes
    stamp = results.stat().st_mtime_ns
    second = _child({"TRAINRT_TUNING_RESULTS_PATH": str(results)})
    assert second["loss"] == pytest.approx(first["loss"], rel=1e-6)
    assert results.stat().st_mtime_ns == stamp  # read, not measured nor rewritten


def test_a_foreign_results_file_is_ignored_with_a_warning(tmp_path):
    results = tmp_path / "tuning.json"
    results.write_text(json.dumps({"format": "trainrt-tuning 1", "cpu": "another CPU", "onednn": "0.0.0",
                                   "trainrt": "0", "choices": {}}))
    run = _child({"TRAINRT_TUNING_RESULTS_PATH": str(results), "TRAINRT_LOG_LEVEL": "WARNING"})
    assert "were measured on 'another CPU'" in run["stderr"] and "ignored" in run["stderr"]
