"""torch.export of a module in its current train/eval mode, with a dynamic batch when possible.

Dim 0 of every tensor input whose size there equals the first tensor input's is marked as one
shared torch.export.Dim("batch"). When the model pins that size (a view to a literal batch, a batch
of 1, which export specializes), export raises a constraint violation and capture falls back to
static shapes. The exported training IR keeps in-place ops (BatchNorm's running stats, `add_` on
buffers); for graphs that have them, functionalization (`run_decompositions({})`, which decomposes
nothing else) turns them into values the graph signature lists as buffer mutations.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch._dynamo.exc import UserError, UserErrorType
from torch.export import Dim, ExportedProgram
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
from torch.utils import _pytree as pytree

from trainrt.capture.errors import CaptureError


def export_program(module: torch.nn.Module, args: tuple, kwargs: dict,
                   dynamic_batch: bool) -> tuple[ExportedProgram, bool]:
    """The functional ExportedProgram of module(*args, **kwargs) and whether its batch is dynamic."""
    _refuse_cumulative_batch_norm(module)
    shapes = _batch_dynamic_shapes(module, args, kwargs) if dynamic_batch else None
    ep = None
    if shapes is not None:
        try:
            ep = _export(module, args, kwargs, shapes)
        except Exception as e:  # noqa: BLE001  (only constraint violations fall back; others re-raise)
            if not _is_constraint_violation(e):
                raise CaptureError(f"torch.export failed for {type(module).__name__}: {e}") from e
    dynamic = ep is not None
    if ep is None:
        try:
            ep = _export(module, args, kwargs, None)
        except Exception as e:  # noqa: BLE001
            raise CaptureError(f"torch.export failed for {type(module).__name__}: {e}") from e
    if not _mutates(ep):
        return ep, dynamic
    with warnings.catch_warnings():  # torch 2.13 warns about its own LeafSpec use while retracing
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        return ep.run_decompositions({}), dynamic


def _refuse_cumulative_batch_norm(module: torch.nn.Module) -> None:
    """BatchNorm with momentum=None in training averages its running stats over all batches with a
    factor 1 / num_batches_tracked that it reads as a Python float: torch.export fails on it with a
    data-dependent guard error. Say so plainly instead."""
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats \
                and m.momentum is None:
            raise CaptureError(f"{type(m).__name__} '{name or type(module).__name__}' has momentum=None (a cumulative "
                               "moving average), which torch.export cannot trace; give it a momentum (e.g. 0.1) "
                               "or capture it in eval mode")


def _mutates(ep: ExportedProgram) -> bool:
    """True when the graph has in-place ops; only then is functionalization (a second trace, slower
    than the export itself) needed. aten.batch_norm in training updates its running stats without
    a mutable schema."""
    for n in ep.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target._schema.is_mutable:
            return True
        if n.target == torch.ops.aten.batch_norm.default and n.args[5] and n.args[3] is not None:
            return True
    return False


def _export(module, args, kwargs, dynamic_shapes) -> ExportedProgram:
    return torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic_shapes, strict=False)


def _is_constraint_violation(e: Exception) -> bool:
    return isinstance(e, ConstraintViolationError) or (
        isinstance(e, UserError) and e.error_type == UserErrorType.CONSTRAINT_VIOLATION)


def _batch_dynamic_shapes(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict | None:
    """dynamic_shapes for torch.export keyed by forward's parameter names: {0: batch} on each tensor
    whose dim 0 has the batch size, None elsewhere. None when no input has a batch of 2 or more
    (export specializes sizes 0 and 1)."""
    tensors = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors or tensors[0].shape[0] < 2:
        return None
    size, batch = tensors[0].shape[0], Dim("batch")

    def spec(x):
        return {0: batch} if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == size else None

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise CaptureError(f"the inputs do not match {type(module).__name__}.forward: {e}") from e
    return {name: pytree.tree_map(spec, value) for name, value in bound.arguments.items()}
