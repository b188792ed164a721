"""BatchNorm with momentum=None (a cumulative moving average) made traceable for torch.export.

In training, torch's `_BatchNorm.forward` counts the batch (`num_batches_tracked += 1`) and then
reads the count as a Python float for the averaging factor `1 / num_batches_tracked`; torch.export
fails on that read (a data-dependent guard). While capture exports, each such module (training,
tracking running stats, torch's own forward) runs this forward instead, which computes the same
thing with the factor as a tensor in the graph (nn.BatchNorm1d docs: running = (1 - f) * running +
f * batch_stat, the variance unbiased; the output normalized with the batch's mean and biased
variance):

    num_batches_tracked += 1;  f = 1 / num_batches_tracked              # () float
    y = batch_norm(x, weight, bias, training, no running stats)         # x: (N, C, ...)
    running_mean = (1 - f) * running_mean + f * mean(x over all but C)  # (C,)
    running_var  = (1 - f) * running_var  + f * var(x over all but C, unbiased)

The writes of the buffers are in-place ops that export keeps and capture functionalizes, so the
engine updates the running stats at each step as eager does. Eager forms the factor in double and the
update in the kernel's accumulation type; here both are in the stats' dtype (float32: a relative
difference of about 1e-7 in the running stats, which only eval mode reads).

    with traceable_cumulative_batch_norms(module):
        ep = torch.export.export(module, args)
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm


def _is_cumulative(m: torch.nn.Module) -> bool:
    return isinstance(m, _BatchNorm) and m.training and m.track_running_stats and m.momentum is None


def _cumulative_forward(self: _BatchNorm, x: torch.Tensor) -> torch.Tensor:
    self._check_input_dim(x)
    self.num_batches_tracked.add_(1)
    factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)  # () 1 / batches seen
    y = F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)
    stats = x.detach().to(self.running_mean.dtype)
    dims = [d for d in range(x.dim()) if d != 1]
    self.running_mean.mul_(1.0 - factor).add_(stats.mean(dims) * factor)
    self.running_var.mul_(1.0 - factor).add_(stats.var(dims, correction=1) * factor)
    return y


def untraceable_batch_norms(module: torch.nn.Module) -> list[str]:
    """Names of momentum=None BatchNorms in training whose forward is a subclass's own (SyncBatchNorm,
    a user's): this module cannot stand in for it."""
    return [name or type(module).__name__ for name, m in module.named_modules()
            if _is_cumulative(m) and type(m).forward is not _BatchNorm.forward]


@contextlib.contextmanager
def traceable_cumulative_batch_norms(module: torch.nn.Module):
    """Inside: every momentum=None BatchNorm in training with torch's own forward runs
    `_cumulative_forward` (an instance attribute, removed on the way out)."""
    patched = [m for m in module.modules() if _is_cumulative(m) and type(m).forward is _BatchNorm.forward
               and "forward" not in vars(m)]
    for m in patched:
        m.forward = types.MethodType(_cumulative_forward, m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward
