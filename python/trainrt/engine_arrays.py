"""Tensors across the engine boundary, zero-copy both ways (DLPack / numpy views).

    views = [engine_view(t) for t in tensors]      # keep these while the engine may read them
    outputs = programs.forward(capsules(views), ...)
    out = from_engine(engine_output)               # a torch tensor over engine memory
"""

from __future__ import annotations

import torch
from torch.utils.dlpack import to_dlpack


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


def from_engine(array) -> torch.Tensor:
    """An engine array as a torch tensor over its memory. The engine hands bf16 out as uint16 bits
    (numpy has no bfloat16; the engine has no uint16), so those are viewed back as bfloat16."""
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if t.dtype == torch.uint16 else t
