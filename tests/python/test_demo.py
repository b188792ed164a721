"""`python -m trainrt.demo` end to end at a tiny size: it trains both runs, reports agreeing loss curves
with the engine running the model (no fallback), and writes its PNG."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

TINY = ["--steps", "6", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "32", "--batch", "2"]


@pytest.mark.slow  # two fresh processes importing torch and transformers, and one capture: ~15 s
def test_demo_trains_both_runs_agrees_and_writes_the_plot(tmp_path):
    plot = tmp_path / "demo.png"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "trainrt.demo", *TINY, "--plot", str(plot)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FELL BACK" not in out.stdout + out.stderr
    assert re.search(r"ran in +PyTorch +the TrainRT engine", out.stdout), out.stdout
    agreement = re.search(r"loss curves agree: max relative difference (\S+) over all 6 steps", out.stdout)
    assert agreement and float(agreement.group(1)) < 1e-5, out.stdout
    assert plot.read_bytes().startswith(b"\x89PNG")
