"""The process's resident memory from /proc/self/status, and a reset of its peak (Linux).

    reset = reset_peak_rss()                 # VmHWM := VmRSS, so the peak below is this phase's own
    before = status_kib("VmRSS")
    ...                                      # the phase to measure
    growth_bytes = (status_kib("VmHWM") - before) * 1024
"""

from __future__ import annotations


def status_kib(field: str) -> int:
    """A KiB field of /proc/self/status: VmRSS (resident now), VmHWM (peak resident)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
