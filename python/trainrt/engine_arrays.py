"""Tensors across the engine boundary, zero-copy both ways (DLPack / numpy views).

    arrays = [as_array(t) for t in tensors]        # what the engine reads
    out = from_engine(engine_output)               # a torch tensor over engine memory
"""

from __future__ import annotations

import torch


def as_array(t: torch.Tensor) -> torch.Tensor:
    """A zero-copy view the engine can read: detached, contiguous CPU memory."""
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def from_engine(array) -> torch.Tensor:
    """An engine array as a torch tensor over its memory. The engine hands bf16 out as uint16 bits
    (numpy has no bfloat16; the engine has no uint16), so those are viewed back as bfloat16."""
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if t.dtype == torch.uint16 else t
