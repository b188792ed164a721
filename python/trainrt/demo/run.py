"""One training run of the demo, in a fresh process of its own, so that the peak memory it reports is
that run's alone (what PyTorch's allocator or the engine keeps after a run would otherwise count
against the next one).

    result = run_in_fresh_process(RunSpec("rtmodule", config.to_dict(), "tensors.pt", lr=1e-3, ...))

The training loop is the one a user writes (GPT-2's recipe: AdamW, linear warm-up, gradient norm
clipped to 1); only the wrapping and the optimizer differ per engine:
    pytorch   the GPT2LMHeadModel itself, torch.optim.AdamW(fused=True)
    rtmodule  trainrt.RTModule(model), trainrt.optim.FusedAdam (AdamW as torch.optim.AdamW computes it)
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import torch
from tqdm import tqdm
from transformers import GPT2Config

from trainrt.bench.rss import reset_peak_rss, status_kib
from trainrt.demo.gpt2 import gpt2_model, sample

LABELS = {"pytorch": "PyTorch", "rtmodule": "RTModule"}
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, the same for both runs
# Warm-up and clipping keep the first steps from jolting the model: without them, training at this size
# is chaotic (float32 rounding differences between two correct implementations grow to percents within
# 100 steps, PyTorch against itself with another AdamW included); with them the two runs stay within
# float32's resolution for ~200 steps and drift apart slowly after (see report.py).
WARMUP_STEPS, MAX_GRAD_NORM = 20, 1.0


@dataclasses.dataclass(frozen=True)
class RunSpec:
    engine: str          # a key of LABELS
    config: dict         # GPT2Config.to_dict()
    tensors_path: str    # torch.save({"init": state_dict, "windows": (steps, B, T) int64})
    lr: float
    prompt: bytes        # the sample's start
    sample_length: int   # bytes to sample after training (0: none)
    seed: int


@dataclasses.dataclass(frozen=True)
class RunResult:
    engine: str
    optimizer: str
    losses: list[float]          # one per step
    step_s: list[float]          # one per step, the first included (RTModule captures and builds there)
    first_step_rss_bytes: int    # peak RSS during the first step, above the RSS before it
    later_rss_bytes: int         # peak RSS during the other steps, above the RSS before the first step
    rss_reset: bool              # False where the kernel refused to reset the peak: numbers are then process peaks
    fallback: str | None         # why RTModule ran PyTorch instead of the engine, or None
    sample: str


def _wrap(engine: str, model: torch.nn.Module, lr: float):
    """(module to train, its optimizer, the optimizer's name)."""
    if engine == "pytorch":
        return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, fused=True), \
            "torch.optim.AdamW(fused=True)"
    import trainrt
    from trainrt.optim import FusedAdam

    module = trainrt.RTModule(model)
    return module, FusedAdam(module.parameters(), lr=lr, weight_decay=WEIGHT_DECAY), "trainrt.optim.FusedAdam"


def train(spec: RunSpec) -> RunResult:
    tensors = torch.load(spec.tensors_path, weights_only=True)
    torch.manual_seed(spec.seed)
    model = gpt2_model(GPT2Config.from_dict(spec.config))
    model.load_state_dict(tensors["init"])
    model.train()
    module, optimizer, optimizer_name = _wrap(spec.engine, model, spec.lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    losses, step_s, fallback = [], [], None

    rss_reset = reset_peak_rss()
    rss_before = status_kib("VmRSS")
    bar = tqdm(tensors["windows"], desc=f"{LABELS[spec.engine]:>8}", unit="step", dynamic_ncols=True)
    for step, ids in enumerate(bar):  # ids: (B, T) byte tokens
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        # As a tokenizer's batch would carry it: every position is text, no padding. GPT2LMHeadModel shifts
        # the labels itself (position t predicts byte t + 1).
        loss = module(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        warmup.step()
        step_s.append(time.perf_counter() - start)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
        if step == 0:
            first_step_rss = status_kib("VmHWM") - rss_before
            reset_peak_rss()
        if fallback is None and spec.engine == "rtmodule" and module.fallback_reason is not None:
            fallback = module.fallback_reason
            bar.write(f"\n{'!' * 100}\n!!! RTModule FELL BACK TO PYTORCH at step {step + 1}: from there on this run "
                      f"is PyTorch, not the TrainRT engine.\n!!! reason: {fallback}\n{'!' * 100}\n")
    later_rss = status_kib("VmHWM") - rss_before
    bar.close()
    return RunResult(spec.engine, optimizer_name, losses, step_s, first_step_rss * 1024, later_rss * 1024,
                     rss_reset, fallback,
                     sample(model, spec.prompt, spec.sample_length, spec.seed) if spec.sample_length else "")


def run_in_fresh_process(spec: RunSpec) -> RunResult:
    """train(spec) in a new Python process (spawned, not forked: nothing of this process is inherited);
    its progress bar and messages go to this process's terminal."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(train, spec).result()
