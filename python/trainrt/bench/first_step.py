"""The first step with a warm export cache: a fresh process, the cache dir a previous process filled.

    python -m trainrt.bench.first_step MODEL MODE        # TRAINRT_CACHE_DIR names the filled cache
    {"first_step_s": 0.31, "from_cache": true}

The suite's main process runs each RTModule mode's first step with an empty cache dir (cache cold:
torch.export and the translation, then the entry is written); warm_first_step then runs this in a
new process, which builds the same model under the same seed and times the first step of a fresh
mode, as measure.py does: one untimed eager step first takes torch's one-time set-up out of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch


def warm_first_step(model: str, mode: str, cache_dir: str) -> dict:
    """{"first_step_s", "from_cache"} of `mode`'s first step on `model` in a new process reading `cache_dir`."""
    env = {**os.environ, "TRAINRT_CACHE_DIR": cache_dir}
    done = subprocess.run([sys.executable, "-m", "trainrt.bench.first_step", model, mode], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the warm-cache first step failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _main(model_name: str, mode_name: str) -> dict:
    from trainrt.bench.measure import _warm_process
    from trainrt.bench.models import MODELS
    from trainrt.bench.modes import MODES

    spec = MODELS[model_name]()
    torch.manual_seed(0)
    model = spec.make()
    _warm_process(spec, model)
    mode = MODES[mode_name](model, spec.sgd)
    exports = []  # a hit runs no torch.export
    real_export = torch.export.export
    torch.export.export = lambda *args, **kwargs: exports.append(1) or real_export(*args, **kwargs)
    start = time.perf_counter()
    mode.step(spec.batch(0)).item()
    seconds = time.perf_counter() - start
    if problem := mode.problem():
        raise RuntimeError(problem)
    return {"first_step_s": seconds, "from_cache": not exports}


if __name__ == "__main__":
    print(json.dumps(_main(*sys.argv[1:3])))
