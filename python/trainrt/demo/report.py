"""The demo's verdict and summary table: do the loss curves agree, how fast was each step, how long the
first step took, how much memory each run's process took on.

    text, ok = summary(pytorch_result, rtmodule_result)
"""

from __future__ import annotations

import statistics

from trainrt.demo.run import LABELS, RunResult

# What "the loss curves agree" means. Both runs compute in float32 from the same weights on the same
# batches, in different orders of operations (the engine's own kernels and fusions), so step 1 differs
# by ~1e-7 relative. Training can amplify such differences chaotically: without warm-up and clipping, or
# at higher learning rates, two correct implementations drift percents apart within 100 steps (PyTorch
# with torch.optim.AdamW against PyTorch with FusedAdam did). So the first steps are compared one by one
# and the whole run as means of consecutive windows of steps, which drift apart only if one run learns
# worse; the largest difference at any step is reported too (at the defaults ~1e-7 up to step 200, then
# growing: ~1e-4 by step 300, ~1e-2 by step 600).
STEPWISE_STEPS, STEPWISE_AGREE = 10, 1e-4
WINDOW, WINDOW_AGREE = 25, 0.05


def relative_differences(ours: list[float], theirs: list[float]) -> list[float]:
    """|ours - theirs| / |theirs| at each step."""
    return [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]


def window_means(losses: list[float]) -> list[float]:
    """Means of consecutive windows of WINDOW steps (the last one may be shorter)."""
    return [statistics.fmean(losses[i:i + WINDOW]) for i in range(0, len(losses), WINDOW)]


def agreement(ours: list[float], theirs: list[float]) -> tuple[float, float, float, bool]:
    """(max relative difference over the first STEPWISE_STEPS steps, over all steps, between window
    means; whether both the first and the last are within their bounds)."""
    stepwise = relative_differences(ours, theirs)
    windows = max(relative_differences(window_means(ours), window_means(theirs)))
    first = max(stepwise[:STEPWISE_STEPS])
    return first, max(stepwise), windows, first <= STEPWISE_AGREE and windows <= WINDOW_AGREE


def median_step_s(run: RunResult) -> float:
    """The median over every step but the first (which holds one-time set-up: capture, engine build)."""
    return statistics.median(run.step_s[1:] or run.step_s)


def spread_s(run: RunResult) -> tuple[float, float]:
    """The 10th and 90th percentiles of the same steps: a wide spread means the machine was busy."""
    times = run.step_s[1:] or run.step_s
    if len(times) < 2:
        return times[0], times[0]
    deciles = statistics.quantiles(times, n=10, method="inclusive")
    return deciles[0], deciles[-1]


def _mib(n: int) -> str:
    return f"{n / 2**20:+.0f} MiB"


def _table(runs: list[RunResult]) -> list[str]:
    rows = [("", [LABELS[r.engine] for r in runs]),
            ("ran in", ["PyTorch" if r.engine == "pytorch" else
                        "the TrainRT engine" if r.fallback is None else "PyTorch (FELL BACK)" for r in runs]),
            ("optimizer", [r.optimizer for r in runs]),
            ("loss: first -> last", [f"{r.losses[0]:.4f} -> {r.losses[-1]:.4f}" for r in runs]),
            ("median step time", [f"{median_step_s(r) * 1e3:.1f} ms" for r in runs]),
            ("step time p10 - p90", ["{:.0f} - {:.0f} ms".format(*(t * 1e3 for t in spread_s(r))) for r in runs]),
            ("first step", [f"{r.step_s[0]:.2f} s" for r in runs]),
            ("peak memory, first step", [_mib(r.first_step_rss_bytes) for r in runs]),
            ("peak memory, later steps", [_mib(r.later_rss_bytes) for r in runs])]
    width = max(len(k) for k, _ in rows)
    col = max(len(v) for _, vs in rows for v in vs) + 2
    return [f"  {k:<{width}}  " + "".join(f"{v:<{col}}" for v in vs).rstrip() for k, vs in rows]


def summary(pytorch: RunResult, rtmodule: RunResult) -> tuple[str, bool]:
    """The printed summary, and whether the demo showed what it claims (engine ran, curves agree)."""
    first, overall, windows, agree = agreement(rtmodule.losses, pytorch.losses)
    steps = len(pytorch.losses)
    ratio = median_step_s(rtmodule) / median_step_s(pytorch)
    lines = ["", f"Summary ({steps} training steps each):", *_table([pytorch, rtmodule]), ""]
    lines.append(f"  loss curves {'agree' if agree else 'DISAGREE'}: max relative difference {overall:.1e} over all "
                 f"{steps} steps;\n  {first:.1e} over the first {min(steps, STEPWISE_STEPS)} (agreement: <= "
                 f"{STEPWISE_AGREE:.0e}), {windows:.1e} between means of {WINDOW} steps (agreement: <= {WINDOW_AGREE:.0%})")
    lines.append("  (float32 rounding differs between the two and training can amplify it, as between any two "
                 "correct implementations:\n  the plot's lower left panel shows the difference at each step)")
    lines.append(f"  step time: RTModule / PyTorch = {ratio:.2f}x (RTModule is {1 / ratio:.2f}x as fast), medians "
                 "without the first step\n  (the runs go one after the other: load from other processes can hit "
                 "one and not the other)")
    lines.append("  RTModule's first step captures the model (torch.export), translates it and builds the engine's "
                 "forward and backward programs")
    lines.append("  peak memory: growth of the peak resident memory (VmHWM) of each run's own fresh process above "
                 "its RSS before the first step\n  (the same weights and data in both, so left out; counted: "
                 "gradients, optimizer state, activations, the engine's buffers;\n  for RTModule also what capture "
                 "leaves resident (graph, programs) and, in the first step, capture itself)")
    if not (pytorch.rss_reset and rtmodule.rss_reset):
        lines.append("  (this kernel refused to reset the peak: the memory rows are whole-process peaks)")
    if rtmodule.fallback is not None:
        lines += ["", "!" * 100,
                  "!!! RTModule FELL BACK TO PYTORCH: its column above is PyTorch running the model, not the engine.",
                  f"!!! reason: {rtmodule.fallback}", "!" * 100]
    return "\n".join(lines), agree and rtmodule.fallback is None
