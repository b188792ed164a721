"""Global-norm gradient clipping for the Trainer in the engine's fused passes.

    norm = clip_grad_norm_(model.parameters(), max_norm=1.0)   # None: not served here, use torch's
    norm = clip_grad_norm_(model.parameters(), max_norm=inf)   # the norm alone (the Trainer's logged grad_norm)

What transformers.Trainer does through accelerate's clip_grad_norm_ (torch.nn.utils.clip_grad_norm_,
whose semantics these are: the L2 norm of all gradients as one vector, then every gradient times
min(1, max_norm / (norm + 1e-6))), in at most two engine calls: one threaded pass over all gradients
for the norm (_C.unscale_and_norm, summed in double, the pass FP16_Optimizer uses), and one in-place
rescale (_C.scale_grads) only when the factor is below 1. torch reads the gradients once per tensor
for the norms and writes every gradient when it multiplies, factor 1 included.

Served: float32, contiguous CPU gradients of plain tensors, none of them a DTensor (FSDP2's shards need
the norm reduced over the mesh: torch's clipping does that) — under DDP the gradients are already the
all-reduced ones, so each rank's norm is the global one. Anything else returns None untouched.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch.utils.dlpack import to_dlpack

from trainrt import _C


def _served(grads: list[torch.Tensor]) -> bool:
    # type() is torch.Tensor: no DTensor or other subclass
    return all(type(g) is torch.Tensor and g.dtype is torch.float32 and g.is_cpu and g.layout is torch.strided
               and g.is_contiguous() for g in grads)


def clip_grad_norm_(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> float | None:
    """The global L2 norm of the gradients, before clipping; clips them in place to max_norm (inf: the
    norm alone). None when the gradients are not served (module docstring): nothing is changed then."""
    named = [(f"parameters[{i}]", p.grad) for i, p in enumerate(parameters) if p.grad is not None]
    grads = [g.detach() for _, g in named]
    if not _served(grads):
        return None
    names = [n for n, _ in named]
    if not grads:
        return 0.0
    # A DLPack capsule is consumed by the call that reads it: one set per engine call.
    norm, _ = _C.unscale_and_norm(names, [to_dlpack(g) for g in grads], 1.0)
    if math.isinf(max_norm):
        return norm
    factor = max_norm / (norm + 1e-6)  # torch.nn.utils.clip_grads_with_norm_'s coefficient, clamped at 1
    if not factor >= 1.0:  # NaN included: torch multiplies by it too
        _C.scale_grads(names, [to_dlpack(g) for g in grads], factor)
    return norm
