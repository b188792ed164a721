"""Another library's forward hooks set aside while the engine stands in for the module they wrap.

DeepSpeed ZeRO-3 (zero3.py) and FSDP2 (fsdp.py) gather parameters in forward hooks on the modules
that own them. RTModule runs those modules as one engine graph and gathers around its engine calls,
so their hooks are taken off while torch.export traces (they would run on fake tensors) and put back
after, in their order. The user's own hooks stay and are captured.

    with forward_hooks_set_aside(model.modules(), lambda hook: is_deepspeed(hook)):
        captured = capture(model, args, kwargs)
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable

import torch


@contextlib.contextmanager
def forward_hooks_set_aside(modules: Iterable[torch.nn.Module], belongs: Callable[[object], bool]):
    """Inside: the forward (pre-)hooks of `modules` for which belongs(hook) is true are removed."""
    saved = []
    for m in modules:
        for hooks in (m._forward_pre_hooks, m._forward_hooks):
            if any(belongs(h) for h in hooks.values()):
                saved.append((hooks, dict(hooks)))
                for key in [k for k, h in hooks.items() if belongs(h)]:
                    del hooks[key]
    try:
        yield
    finally:
        for hooks, everything in saved:  # in their order
            hooks.clear()
            hooks.update(everything)
