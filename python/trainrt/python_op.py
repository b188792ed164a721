"""The Python side of PythonOp: the engine's kernels call these to run a user's autograd.Function.

At a PythonOp node, `_forward` calls the Function through torch's own `apply` on views of the
engine's inputs, with autograd recording when the engine call will have a backward: the Function
gets a real ctx, so save_for_backward / saved_tensors, attributes on ctx, needs_input_grad,
mark_non_differentiable, mark_dirty, set_materialize_grads and once_differentiable all behave as
in eager. The node's ctx output is a handle to that record. At PythonOpGrad, `_backward` runs the
user's backward through torch.autograd.grad on the recorded outputs.

Inputs the ctx keeps (saved, or set on it) and inputs changed in place (mark_dirty) are copied
first: the engine reuses an input's memory once the node has read it. Others cross without a copy.

Records live while the engine call that made them can still be differentiated: an `EngineCall`
scope collects the handles of one engine forward and drops them when its autograd node is freed
(or after a backward that does not retain the graph).

An exception raised in the user's code is kept here and re-raised by `EngineCall` once the engine
call has unwound (the C++ run stops with an Error first); the engine stays usable.
"""

from __future__ import annotations

import itertools

import torch

from trainrt import _C
from trainrt.capture.autograd_function import CALLS
from trainrt.engine_arrays import from_engine

_records: dict[int, "_Applied"] = {}
_handles = itertools.count(1)
_current: "EngineCall | None" = None  # the engine call now running (PythonOp kernels run inside it)
_pending: list[BaseException] = []


class _Applied:
    """One forward call of a Function: its outputs (the autograd graph hangs on them) and the
    leaves standing for the inputs that require grad."""

    def __init__(self, outputs: list[torch.Tensor], leaves: list[torch.Tensor | None]):
        self.outputs, self.leaves = outputs, leaves


class EngineCall:
    """Around one engine call (forward, backward or inference) of a graph with PythonOps.

        with EngineCall(grad=True) as call:
            outputs = programs.forward(...)
        ctx.python_ops = call          # its records go when the autograd node does
    """

    def __init__(self, grad: bool, retain: bool = False):
        self.grad, self.retain = grad, retain
        self.handles: list[int] = []

    def __enter__(self):
        global _current
        self._outer, _current = _current, self
        return self

    def __exit__(self, kind, value, tb):
        global _current
        _current = self._outer
        if _pending:
            error = _pending.pop()
            _pending.clear()
            if value is not None:
                raise error.with_traceback(error.__traceback__) from None
        return False

    def release(self) -> None:
        for h in self.handles:
            _records.pop(h, None)
        self.handles.clear()

    def __del__(self):
        self.release()


def _forward(call_id: int, capsules: list) -> tuple[int, list[torch.Tensor]] | None:
    try:
        record = CALLS[call_id]
        grad = _current is not None and _current.grad
        inputs, leaves = [], []
        with torch.enable_grad() if grad else torch.no_grad():  # engine calls run under no_grad
            for i, t in enumerate(from_engine(c) for c in capsules):
                if i in record.kept_inputs or i in record.dirty_inputs:
                    t = t.clone()
                leaf = None
                if grad and record.input_requires_grad[i]:
                    leaf = t.detach().requires_grad_()
                    t = leaf.clone() if i in record.dirty_inputs else leaf  # in place on a leaf is refused
                inputs.append(t)
                leaves.append(leaf)
            out = record.function.apply(*record.arguments(inputs))
        outputs = [out] if isinstance(out, torch.Tensor) else list(out)
        handle = 0
        if grad and any(leaf is not None for leaf in leaves):
            handle = next(_handles)
            _records[handle] = _Applied(outputs, leaves)
            _current.handles.append(handle)
        return handle, [o.detach().contiguous() for o in outputs]
    except BaseException as err:  # noqa: BLE001  (re-raised by EngineCall in the caller)
        _pending.append(err)
        return None


def _backward(handle: int, capsules: list) -> list[torch.Tensor | None] | None:
    try:
        record = _records.get(handle)
        if record is None:
            raise RuntimeError("PythonOp: the Function's ctx was already freed (backward through it a second time "
                               "without retain_graph?)")
        grads = [None if c is None else from_engine(c) for c in capsules]
        pairs = [(o, g) for o, g in zip(record.outputs, grads) if g is not None and o.requires_grad]
        wrt = [leaf for leaf in record.leaves if leaf is not None]
        retain = _current is not None and _current.retain
        result = [None] * len(record.leaves)
        if pairs and wrt:
            dx = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True,
                                     retain_graph=retain)
            found = iter(dx)
            result = [None if leaf is None else next(found) for leaf in record.leaves]
        if not retain:
            _records.pop(handle, None)
        return [None if g is None else g.contiguous() for g in result]
    except BaseException as err:  # noqa: BLE001  (re-raised by EngineCall in the caller)
        _pending.append(err)
        return None


_C.set_python_op_callbacks(_forward, _backward)
