"""The demo's PNG: both loss curves and their relative difference per step, the median step time and the
peak memory of each run."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from trainrt.demo.report import median_step_s, relative_differences  # noqa: E402
from trainrt.demo.run import LABELS, RunResult  # noqa: E402

COLORS = {"pytorch": "tab:blue", "rtmodule": "tab:orange"}


def write_plot(path: str, title: str, pytorch: RunResult, rtmodule: RunResult) -> None:
    runs = [pytorch, rtmodule]
    names = [LABELS[r.engine] + (" (fell back)" if r.fallback else "") for r in runs]
    colors = [COLORS[r.engine] for r in runs]
    fig = plt.figure(figsize=(15, 6.4))
    grid = fig.add_gridspec(2, 3, width_ratios=[3, 1, 1], height_ratios=[2, 1])
    loss_ax, diff_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0])
    time_ax, mem_ax = fig.add_subplot(grid[:, 1]), fig.add_subplot(grid[:, 2])
    steps = range(1, len(pytorch.losses) + 1)

    for run, name, style in zip(runs, names, ["-", "--"]):
        loss_ax.plot(steps, run.losses, style, color=COLORS[run.engine], label=name)
    loss_ax.set(ylabel="training loss (nats per byte)", title="loss curves, same weights and batches")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)

    floor = 1e-8  # below float32's resolution (1.2e-7): equal losses are drawn there on the log axis
    difference = [max(d, floor) for d in relative_differences(rtmodule.losses, pytorch.losses)]
    diff_ax.semilogy(steps, difference, color="tab:gray")
    diff_ax.set(xlabel="step", ylabel="relative difference\n(equal: at 1e-8)", ylim=(floor / 2, 1))
    diff_ax.grid(alpha=0.3)

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
