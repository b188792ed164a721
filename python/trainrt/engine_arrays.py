"""Tensors across the engine boundary, zero-copy both ways (DLPack capsules).

    views = [engine_view(t) for t in tensors]      # keep these while the engine may read them
    outputs = programs.forward(capsules(views), ...)
    out = from_engine(engine_output)               # a torch tensor over engine memory
"""

from __future__ import annotations

import torch
from torch.utils.dlpack import to_dlpack

# What torch.from_dlpack calls for a capsule, without its checks for other kinds of input (~0.2 us).
_from_capsule = getattr(torch._C, "_from_dlpack", torch.from_dlpack)


def engine_view(t: torch.Tensor) -> torch.Tensor:
    """What the engine can read: contiguous CPU memory (a copy only if t is strided). Not detached:
    to_dlpack takes a tensor that requires grad (only its __dlpack__ method refuses one), the engine
    never touches autograd, and a detach costs ~0.75 us a tensor, per input per step."""
    return t if t.is_contiguous() else t.detach().contiguous()


def capsules(views: list) -> list:
    """DLPack capsules of engine views (None stays None), which the engine takes without a copy.
    Capsules, not the tensors: torch's __dlpack__ method costs ~2 us a tensor in Python, a capsule
    ~0.25 us. A capsule does not keep its view alive once the engine has read it into an array, so
    the caller holds `views` for as long as the engine may read them (a forward's inputs: until its
    backward)."""
    return [None if v is None else to_dlpack(v) for v in views]


def from_engine(capsule) -> torch.Tensor:
    """An engine output (a DLPack capsule that owns engine memory) as a torch tensor over that memory.
    Not torch.from_numpy of a numpy array: torch frees such a tensor only with the GIL, which a gloo
    or autograd thread freeing it while the interpreter shuts down cannot take (the process aborts
    with "terminate called without an active exception"); this one is freed in plain C++."""
    return _from_capsule(capsule)
