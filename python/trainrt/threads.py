"""Who owns the cores during an engine call: the engine's loops use as many threads as torch's do.

    threads.follow(None)   # before each engine call: torch.get_num_threads() threads
    threads.follow(4)      # TRAINRT_NUM_THREADS=4 (RuntimeOptions.num_threads): four, whatever torch uses

torch.get_num_threads() follows torch.set_num_threads and OMP_NUM_THREADS, which torchrun sets to 1 per
rank: 2 ranks on 2 cores then run one engine thread each instead of two each. oneDNN runs inside the
engine's loops on one thread (kernels/cpu/onednn_runtime.h), so the engine never runs more threads
than that between its pool and oneDNN. The engine's pool is sized to the cores the process may run on;
the budget (core/thread_budget.h) lowers what a loop takes, never raises it past the pool.
"""

from __future__ import annotations

import torch

from trainrt import _C

_current: int | None = None  # the budget last given to the engine


def follow(fixed: int | None) -> None:
    """Sets the engine's thread budget to `fixed`, or to torch.get_num_threads() when None (one
    engine call costs a comparison when nothing changed)."""
    global _current
    n = fixed or torch.get_num_threads()
    if n != _current:
        _C.set_num_threads(n)
        _current = n
