"""The Python side of PythonOp: the engine's kernels call these to run a user's autograd.Function.

At a PythonOp node, `_forward` calls the Function through torch's own `apply` on views of the
engine's inputs, with autograd recording when the engine call will have a backward: the Function
gets a real ctx, so save_for_backward / saved_tensors, attributes on ctx, needs_input_grad,
mark_non_differentiable, mark_dirty, set_materialize_grads and once_differentiable all behave as
in eager. The node's ctx output is a handle to that record. At PythonOpGrad, `_backward` calls the
user's backward on that ctx directly, with the checks autograd's engine makes of its result (about
25 µs less than a torch.autograd.grad call); where eager would materialize a None gradient or
an output is non-differentiable, it goes through torch.autograd.grad on the recorded outputs.
Tensors go back to the engine as DLPack capsules (to_dlpack: a C call, where `__dlpack__` is Python).

Inputs the ctx keeps (saved, or set on it) and inputs changed in place (mark_dirty) are copied
first: the engine reuses an input's memory once the node has read it. Others cross without a copy.

Records live while the engine call that made them can still be differentiated: an `EngineCall`
scope collects the handles of one engine forward and drops them when its autograd node is freed
(or after a backward that does not retain the graph). The scope is per thread: the engine runs a
call's nodes on the thread that made it, so two Python threads in engine calls at once (a
DataParallel-style replica per thread) each see their own call and their own pending errors.

An exception raised in the user's code is kept here and re-raised by `EngineCall` once the engine
call has unwound (the C++ run stops with an Error first); the engine stays usable.
"""

from __future__ import annotations

import itertools
import threading

import torch
from torch.autograd.function import BackwardCFunction
from torch.utils.dlpack import to_dlpack

from trainrt import _C
from trainrt.capture.autograd_function import CALLS, FunctionCall, _Slot
from trainrt.engine_arrays import from_engine

_records: dict[int, "_Applied"] = {}
_handles = itertools.count(1)


class _ThreadState(threading.local):
    """This thread's engine call now running (PythonOp kernels run inside it) and the exceptions its
    user code raised, to be re-raised when the call unwinds."""

    def __init__(self):
        self.current: EngineCall | None = None
        self.pending: list[BaseException] = []


_state = _ThreadState()


class _Applied:
    """One forward call of a Function: its record, its outputs (the autograd graph hangs on them)
    and the leaves standing for the inputs that require grad."""

    def __init__(self, record: FunctionCall, outputs: list[torch.Tensor], leaves: list[torch.Tensor | None]):
        self.record, self.outputs, self.leaves = record, outputs, leaves


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
        self._outer, _state.current = _state.current, self
        return self

    def __exit__(self, kind, value, tb):
        _state.current = self._outer
        if _state.pending:
            error = _state.pending.pop()
            _state.pending.clear()
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
        current = _state.current
        grad = current is not None and current.grad
        inputs, leaves = [], []
        was_enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(grad)  # engine calls run under no_grad; the Function records when differentiable
        try:
            for i, t in enumerate(from_engine(c) for c in capsules):
                if i in record.kept_inputs or i in record.dirty_inputs:
                    t = t.clone()
                leaf = None
                if grad and record.input_requires_grad[i]:
                    leaf = t.requires_grad_()  # a fresh tensor of the engine's: a leaf already
                    t = leaf.clone() if i in record.dirty_inputs else leaf  # in place on a leaf is refused
                inputs.append(t)
                leaves.append(leaf)
            out = record.function.apply(*record.arguments(inputs))
        finally:
            torch._C._set_grad_enabled(was_enabled)
        outputs = [out] if isinstance(out, torch.Tensor) else list(out)
        handle = 0
        if grad and any(leaf is not None for leaf in leaves):
            handle = next(_handles)
            _records[handle] = _Applied(record, outputs, leaves)
            current.handles.append(handle)
        return handle, [to_dlpack(o if o.is_contiguous() else o.contiguous()) for o in outputs]
    except BaseException as err:  # noqa: BLE001  (re-raised by EngineCall in the caller)
        _state.pending.append(err)
        return None


def _backward(handle: int, capsules: list) -> list[torch.Tensor | None] | None:
    try:
        applied = _records.get(handle)
        if applied is None:
            raise RuntimeError("PythonOp: the Function's ctx was already freed (backward through it a second time "
                               "without retain_graph?)")
        grads = [None if c is None else from_engine(c) for c in capsules]
        retain = _state.current is not None and _state.current.retain
        node = _function_node(applied, grads)
        if node is not None:
            with torch.no_grad():
                result = _checked_gradients(applied, node.apply(*grads))
        else:
            result = _through_autograd(applied, grads, retain)
        if not retain:
            _records.pop(handle, None)
        return [None if g is None else to_dlpack(g if g.is_contiguous() else g.contiguous()) for g in result]
    except BaseException as err:  # noqa: BLE001  (re-raised by EngineCall in the caller)
        _state.pending.append(err)
        return None


def _function_node(applied: _Applied, grads: list) -> object | None:
    """The Function's own backward node (its ctx) when the user's backward can be called on it
    directly, as autograd's engine would call it: every output got a gradient and requires grad
    (no None to materialize, no output marked non-differentiable) and they all hang on that node."""
    if any(g is None for g in grads) or not applied.outputs:
        return None
    node = applied.outputs[0].grad_fn
    if not isinstance(node, BackwardCFunction) or node._forward_cls is not applied.record.function:
        return None
    if any(o.grad_fn is not node for o in applied.outputs):
        return None
    return node


def _through_autograd(applied: _Applied, grads: list, retain: bool) -> list:
    """The user's backward run by autograd's engine on the recorded outputs: materialized None
    gradients and non-differentiable outputs as eager has them."""
    pairs = [(o, g) for o, g in zip(applied.outputs, grads) if g is not None and o.requires_grad]
    wrt = [leaf for leaf in applied.leaves if leaf is not None]
    if not pairs or not wrt:
        return [None] * len(applied.leaves)
    dx = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True,
                                  retain_graph=retain))
    return [None if leaf is None else next(dx) for leaf in applied.leaves]


def _checked_gradients(applied: _Applied, returned) -> list:
    """The user's backward's result, one entry per forward argument, as autograd's engine checks it
    (torch/csrc/autograd/python_function.cpp, validate_outputs): the count, None at non-tensor
    arguments, a gradient broadcast to its input's shape summed back to it, its dtype cast to the
    input's. Returns the gradients of the tensor inputs (None where none is wanted)."""
    record = applied.record
    returned = returned if isinstance(returned, tuple) else (returned,)
    name = f"autograd.Function {record.name}"
    if len(returned) < len(record.template) or any(g is not None for g in returned[len(record.template):]):
        raise RuntimeError(f"{name}: backward returned an incorrect number of gradients (expected "
                           f"{len(record.template)}, got {len(returned)})")
    result = [None] * len(applied.leaves)
    for position, (argument, g) in enumerate(zip(record.template, returned)):
        if not isinstance(argument, _Slot):
            if g is not None:
                raise RuntimeError(f"{name}: backward returned a gradient different than None at position "
                                   f"{position}, but the corresponding forward input was not a tensor")
            continue
        leaf = applied.leaves[argument.index]
        if g is None or leaf is None:
            continue
        if not isinstance(g, torch.Tensor):
            raise TypeError(f"{name}: backward returned {type(g).__name__} as the gradient of input "
                            f"{position}, expected a tensor or None")
        if g.shape != leaf.shape:
            if not _expandable(leaf.shape, g.shape):
                raise RuntimeError(f"{name}: backward returned an invalid gradient for input {position}: got "
                                   f"{list(g.shape)} but expected shape compatible with {list(leaf.shape)}")
            g = g.sum_to_size(leaf.shape)
        result[argument.index] = g if g.dtype == leaf.dtype else g.to(leaf.dtype)
    return result


def _expandable(shape: torch.Size, to: torch.Size) -> bool:
    """Whether `shape` broadcasts to `to` (so a gradient of shape `to` sums back to `shape`)."""
    if len(shape) > len(to):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(shape), reversed(to)))


_C.set_python_op_callbacks(_forward, _backward)
