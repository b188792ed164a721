"""The demo's PNG: both loss curves over the steps, the median step time and the peak memory of each run."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from trainrt.demo.report import max_relative_difference, median_step_s  # noqa: E402
from trainrt.demo.run import LABELS, RunResult  # noqa: E402

COLORS = {"pytorch": "tab:blue", "rtmodule": "tab:orange"}


def write_plot(path: str, title: str, pytorch: RunResult, rtmodule: RunResult) -> None:
    runs = [pytorch, rtmodule]
    names = [LABELS[r.engine] + (" (fell back)" if r.fallback else "") for r in runs]
    colors = [COLORS[r.engine] for r in runs]
    fig, (loss_ax, time_ax, mem_ax) = plt.subplots(1, 3, figsize=(15, 4.8), width_ratios=[3, 1, 1])

    for run, name, style in zip(runs, names, ["-", "--"]):
        loss_ax.plot(range(1, len(run.losses) + 1), run.losses, style, color=COLORS[run.engine], label=name)
    difference = max_relative_difference(rtmodule.losses, pytorch.losses)
    loss_ax.set(xlabel="step", ylabel="training loss (cross-entropy, nats per byte)",
                title=f"loss curves: max relative difference {difference:.1e}")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)

    times = [median_step_s(r) * 1e3 for r in runs]
    time_ax.bar(names, times, color=colors)
    time_ax.set(ylabel="ms", title=f"median step time\nRTModule / PyTorch = {times[1] / times[0]:.2f}x")
    for x, t in enumerate(times):
        time_ax.annotate(f"{t:.0f} ms", (x, t), ha="center", va="bottom")

    peaks = [r.later_rss_bytes / 2**20 for r in runs]
    mem_ax.bar(names, peaks, color=colors)
    mem_ax.set(ylabel="MiB", title="peak memory growth, steps 2 on\n(RSS above the RSS before step 1)")
    for x, m in enumerate(peaks):
        mem_ax.annotate(f"{m:.0f} MiB", (x, m), ha="center", va="bottom")

    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
