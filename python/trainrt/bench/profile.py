"""`--profile DIR`: where an RTModule training step spends its time, per engine program.

Runs a few RTModule steps of each model with per-node timing on (TRAINRT_PROFILE), writes Chrome
traces (DIR/<model>_forward.json, DIR/<model>_backward.json) and returns the op-type tables.
Kept apart from the timed runs: profiling adds a clock read per node.
"""

from __future__ import annotations

import os

import torch

import trainrt
from trainrt.bench.models import ModelSpec


def profile_model(spec: ModelSpec, directory: str, steps: int = 3, top: int = 5) -> str:
    os.makedirs(directory, exist_ok=True)
    previous = os.environ.get("TRAINRT_PROFILE")
    os.environ["TRAINRT_PROFILE"] = "1"
    try:
        torch.manual_seed(0)
        model = trainrt.RTModule(spec.make())
    finally:
        if previous is None:
            del os.environ["TRAINRT_PROFILE"]
        else:
            os.environ["TRAINRT_PROFILE"] = previous
    optimizer = trainrt.optim.FusedAdam(model.parameters(), lr=1e-4)
    for step in range(steps):
        loss = model(*spec.batch(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    prefix = os.path.join(directory, spec.name)
    model.write_profile(prefix)
    return f"{spec.name}: top ops by engine time over {steps} RTModule steps (traces {prefix}_*.json)\n" + \
        model.profile_summary(top)
