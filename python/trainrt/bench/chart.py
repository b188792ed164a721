"""`--plot FILE.png`: the suite's ratios to eager as grouped bars, one panel per measure.

Bars below 1 mean less time or memory than PyTorch eager. Uses matplotlib's non-interactive Agg
backend (no screen needed).
"""

from __future__ import annotations

_MEASURES = [("step_median_s", "step time / eager"), ("first_step_s", "first step / eager (log)"),
             ("peak_rss_increase_bytes", "peak RSS growth / eager")]


def write_chart(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in results["models"] if "modes" in m and "eager" in m["modes"]]
    modes = [mode for mode in results["modes"] if mode != "eager"]
    fig, axes = plt.subplots(1, len(_MEASURES), figsize=(5 * len(_MEASURES), 4))
    width = 0.8 / max(1, len(modes))
    for ax, (key, title) in zip(axes, _MEASURES):
        for k, mode in enumerate(modes):
            values = []
            for m in models:
                r, base = m["modes"].get(mode, {}), m["modes"]["eager"].get(key)
                values.append(r[key] / base if key in r and base else 0.0)
            ax.bar([i + k * width for i in range(len(models))], values, width, label=mode)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(models))], [m["model"] for m in models])
        ax.set_title(title)
        if key == "first_step_s":
            ax.set_yscale("log")
    axes[0].legend(loc="lower left")
    fig.suptitle(f"TrainRT benchmark ({results['suite']} suite): ratios to PyTorch eager, lower is better")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
