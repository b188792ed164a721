"""While exporting, a submodule converted in its own model's forward to the dtype and device it
already has is left as it is.

Switch Transformers' router runs `self.classifier = self.classifier.to(self.dtype)` in forward (its
"selective precision": the router in float32). Under torch.export the module's parameters are
export's stand-ins, and `nn.Module.to` swaps each for a converted copy, which export refuses:
`_apply(): Couldn't swap Linear.weight`. A conversion to what the module already is changes nothing,
so `nn.Module.to` returns the module itself then, as it would have been unchanged in eager mode. A
conversion that changes something is left to torch (and still fails under export: the cause is
torch.export's, and the capture error says so).
"""

from __future__ import annotations

import contextlib
import itertools

import torch

_original_to = torch.nn.Module.to


def _changes_nothing(module: torch.nn.Module, device, dtype, memory_format) -> bool:
    """Whether module.to(device, dtype) leaves every parameter and buffer as it is (to() converts
    only floating-point and complex tensors to `dtype`)."""
    if memory_format is not None:
        return False
    for t in itertools.chain(module.parameters(), module.buffers()):
        if device is not None and t.device != torch.device(device):
            return False
        if dtype is not None and (t.is_floating_point() or t.is_complex()) and t.dtype != dtype:
            return False
    return True


def _to_unless_unchanged(self, *args, **kwargs):
    device, dtype, _non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if _changes_nothing(self, device, dtype, memory_format):
        return self
    return _original_to(self, *args, **kwargs)


@contextlib.contextmanager
def unchanged_conversions_skipped():
    """nn.Module.to returns the module unchanged where it would change nothing, for the duration."""
    torch.nn.Module.to = _to_unless_unchanged
    try:
        yield
    finally:
        torch.nn.Module.to = _original_to
