"""The fine-tuning example under the launchers people use: `torchrun` and `accelerate launch`,
2 CPU processes (gloo), with fallback disabled. Each rank trains in the engine (the example prints
its fallback reason, which must be None) and the run exits cleanly. The losses of a 2-rank run
against one process are compared in test_hf_trainer_ddp.py; this checks the launchers' own set-up
(environment, process group, Trainer's distributed sampler) reaches the engine."""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # two 2-process runs of a small BERT

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent


def _launch(cmd: list[str], tmp_path) -> str:
    env = {**os.environ, "TRAINRT_FALLBACK_POLICY": "FALLBACK_DISABLE", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(cmd + [str(ROOT / "examples/finetune_glue_style.py"), "--steps", "4",
                                 "--output-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_example_trains_in_the_engine_under_the_launcher(launcher, tmp_path):
    if launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2"]
    else:
        cmd = [str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no"]
    out = _launch(cmd, tmp_path)
    assert "fallback: None" in out and "accuracy" in out
