"""A user's torch.autograd.Function stays one node through torch.export, so its own backward runs.

torch.export traces through `Function.apply` (pytorch/pytorch#106388 asks for an operator that
keeps it), which would differentiate the forward's ops and ignore the user's backward: wrong for a
straight-through estimator or a gradient reversal. While capture exports, `keep_functions_opaque`
routes each user Function's apply through one custom op, `trainrt::python_op(tensors, call_id)`;
the translator turns it into a PythonOp node (capture/ops_python.py) whose kernels call the user's
forward and backward at run time (trainrt/python_op.py, src/python/python_op_bindings.cc).

    with keep_functions_opaque():
        ep = torch.export.export(model, args, strict=False)    # STE.apply(x) -> trainrt.python_op

A `FunctionCall` record per apply keeps what the graph cannot: the class, its non-tensor arguments
(the node's `call_id` names the record), which inputs its ctx keeps (copied at run time: engine
memory is reused after the node) and which it marks dirty. The op's fake implementation runs the
user's forward on FakeTensors with a stand-in ctx, so the capture sees the outputs' shapes and
dtypes, symbolic dims included; `register_shape_inference(Fn, fn)` replaces that run for a
Function whose forward cannot run on FakeTensors.

Not kept opaque, so traced into the graph: Functions of torch itself (checkpoint's among them:
checkpointing is a memory request, captured into the engine), RTModule's own engine call, the classes named in
SKIPPED_AUTOGRAD_FUNCTIONS, and every Function when ENABLE_CUSTOM_AUTOGRAD is 0 (announced once:
their custom backwards are then ignored); RTModule passes those options (options.RuntimeOptions) as a
FunctionCapture.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from dataclasses import dataclass, field

import torch
import torch.utils.checkpoint
from torch.utils import _pytree as pytree

from trainrt.capture.checkpoint_regions import run_reentrant
from trainrt.capture.errors import CaptureError

_log = logging.getLogger("trainrt")
_FUNCTION = torch.autograd.function.Function
_original_apply = _FUNCTION.apply.__func__
_shape_inference: dict[type, object] = {}
_warned_inlined = False


@dataclass(frozen=True)
class FunctionCapture:
    """Which autograd.Functions capture keeps opaque (RuntimeOptions.custom_autograd and
    skipped_autograd_functions): part of what a captured graph depends on, so of the cache key."""

    enabled: bool = True
    skipped: tuple[str, ...] = ()  # full names, or bare __qualname__s, traced through instead


def full_name(cls: type) -> str:
    """module + __qualname__ (`<locals>` included): two Functions named alike stay apart."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_shape_inference(function: type, infer) -> None:
    """`infer(*args)` returns the outputs' (shape, dtype) pairs for `function`'s arguments (FakeTensors
    and the non-tensor arguments); capture uses it instead of running the forward on FakeTensors.

    Use it for a `torch.autograd.Function` whose forward cannot run on FakeTensors (it reads values,
    calls numpy or a C extension): the Function still runs as one PythonOp node with its own forward
    and backward.

    Example:

        >>> class Quantize(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         return torch.from_numpy(np.round(x.numpy()))     # numpy: no FakeTensors
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         return g                                       # straight-through
        >>> trainrt.register_shape_inference(Quantize, lambda x: [(x.shape, x.dtype)])
    """
    _shape_inference[function] = infer


@dataclass
class _Slot:
    """Where tensor argument `index` goes in the rebuilt arguments."""

    index: int


@dataclass
class FunctionCall:
    """One apply call seen by the capture: enough to call the Function again at run time.

    Its tensors are the node's inputs, in order: the tensor arguments, then the tensors inside list,
    tuple and dict arguments. As in eager, only the positional
    ones are the Function's autograd inputs (the others get no gradient, and the backward returns
    None at their argument). Keyword arguments were bound to their positions, as torch's apply does."""

    function: type
    template: list  # the positional arguments, tensors (also inside containers) replaced by _Slot
    input_requires_grad: list[bool]
    kept_inputs: set[int] = field(default_factory=set)  # tensor inputs the ctx keeps (saved, set on it, viewed by a kept output)
    dirty_inputs: set[int] = field(default_factory=set)  # tensor inputs changed in place (mark_dirty)
    single_output: bool = True  # forward returned one tensor, not a tuple

    @property
    def name(self) -> str:
        return full_name(self.function)

    def arguments(self, tensors: list) -> list:
        """The positional arguments with `tensors` in the slots."""
        return [_fill(a, tensors) for a in self.template]


def _fill(argument, tensors: list):
    if isinstance(argument, _Slot):
        return tensors[argument.index]
    if isinstance(argument, (list, tuple, dict)):
        return pytree.tree_map(lambda a: tensors[a.index] if isinstance(a, _Slot) else a, argument)
    return argument


CALLS: list[FunctionCall] = []  # call_id -> record, for the life of the process


class _CaptureCtx:
    """What a Function's forward sees of ctx while the capture runs it on FakeTensors: the calls
    the capture needs to hear about (what is saved, dirty, non-differentiable); attributes as usual."""

    def __init__(self, needs_input_grad: tuple):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved, self._dirty, self._non_differentiable = (), (), ()

    def save_for_backward(self, *tensors):
        self._saved = tensors

    @property
    def saved_tensors(self):
        return self._saved

    def mark_dirty(self, *tensors):
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


def _uses_setup_context(function: type) -> bool:
    return function.setup_context is not _FUNCTION.setup_context  # a staticmethod: plain functions


def run_forward(record: FunctionCall, tensors: list, ctx) -> object:
    """The Function's forward on `tensors` with `ctx`, old style (forward(ctx, ...)) or new style
    (forward(...) then setup_context(ctx, inputs, output))."""
    args = record.arguments(tensors)
    if _uses_setup_context(record.function):
        out = record.function.forward(*args)
        record.function.setup_context(ctx, tuple(args), out)
        return out
    return record.function.forward(ctx, *args)


@torch.library.custom_op("trainrt::python_op", mutates_args=())
def python_op(inputs: list[torch.Tensor], call_id: int) -> list[torch.Tensor]:
    """Eager: the Function's forward on `inputs` (the engine runs it through PythonOp instead). Export
    calls it on real tensors when it decides a branch on data by their values (branch_checks.py),
    while Function.apply is routed here: the Function's own apply is then a plain call."""
    record = CALLS[call_id]
    with _inline_nested(), torch.no_grad():
        out = record.function.apply(*record.arguments([t.clone() for t in inputs]))
    return [o.clone() for o in _output_list(record, out)]


@python_op.register_fake
def _python_op_fake(inputs, call_id):
    """The outputs' FakeTensors: the user's shape inference, else the forward run on FakeTensors."""
    record = CALLS[call_id]
    infer = _shape_inference.get(record.function)
    if infer is not None:
        specs = infer(*record.arguments(list(inputs)))
        return [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
    ctx = _CaptureCtx(tuple(record.input_requires_grad))
    clones = [t.clone() for t in inputs]  # the forward may change inputs in place (mark_dirty)
    with _inline_nested(), torch.no_grad():
        out = run_forward(record, clones, ctx)
    outputs = _output_list(record, out)
    position = {id(t): i for i, t in enumerate(clones)}
    kept = [t for t in ctx._saved if isinstance(t, torch.Tensor)]
    kept += [v for v in vars(ctx).values() if isinstance(v, torch.Tensor)]
    record.kept_inputs = {position[id(t)] for t in kept if id(t) in position}
    # An output the ctx keeps may view any input (x.view_as(x), saved): then every input is copied
    # at run time, since the engine reuses an input's memory once the node has read it.
    if any(id(t) in {id(o) for o in outputs} for t in kept):
        record.kept_inputs = set(range(len(clones)))
    record.dirty_inputs = {position[id(t)] for t in ctx._dirty if id(t) in position}
    return [o.clone() for o in outputs]


def _output_list(record: FunctionCall, out) -> list[torch.Tensor]:
    """The forward's result as a list of tensors (and, in the record, whether it was one tensor);
    CaptureError for anything but tensors."""
    record.single_output = isinstance(out, torch.Tensor)
    outputs = [out] if record.single_output else list(out) if isinstance(out, (tuple, list)) else None
    if outputs is None or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise CaptureError(f"autograd.Function {record.name} returned {type(out).__name__} "
                           f"{'' if outputs is None else [type(o).__name__ for o in outputs]}; "
                           "PythonOp takes Functions that return tensors (one, or a tuple of them)")
    return outputs


_nested = 0  # > 0 inside a forward the capture runs: Functions it calls are plain calls


@contextlib.contextmanager
def _inline_nested():
    global _nested
    _nested += 1
    try:
        yield
    finally:
        _nested -= 1


_policy = FunctionCapture()  # the one keep_functions_opaque was given


def _opaque(cls: type) -> bool:
    module = cls.__module__ or ""
    # torch's own Functions are traced; so is RTModule's engine call (an RTModule inside the captured one).
    if _nested or module.startswith("torch.") or module in ("torch", "trainrt.rtmodule"):
        return False
    if full_name(cls) in _policy.skipped or cls.__qualname__ in _policy.skipped:
        return False
    if not _policy.enabled:
        global _warned_inlined
        if not _warned_inlined:
            _warned_inlined = True
            _log.warning("trainrt: custom autograd.Function support is off (ENABLE_CUSTOM_AUTOGRAD=0): the forwards "
                         "of Functions such as %s are traced and their custom backwards are ignored", full_name(cls))
        return False
    return True


def _apply(cls, *args, **kwargs):
    """Function.apply while capture exports: a user Function becomes one trainrt::python_op call.
    Reentrant checkpointing (CheckpointFunction.apply(run, preserve_rng_state, *inputs)) runs its
    block under no_grad to recompute it with grad in its backward; the capture calls the block
    itself instead, in a marked region, so its ops are captured into the engine and its activations
    recomputed there (checkpoint_regions.py)."""
    if cls is torch.utils.checkpoint.CheckpointFunction and not _nested:
        return run_reentrant(args)
    if not _opaque(cls):
        return _original_apply(cls, *args, **kwargs)
    if kwargs or _uses_setup_context(cls):
        args = _bound_positionally(cls, args, kwargs)
    tensors: list[torch.Tensor] = []
    requires_grad: list[bool] = []

    def slot(a, differentiable: bool):
        tensors.append(a)
        requires_grad.append(differentiable and a.requires_grad and a.dtype.is_floating_point)
        return _Slot(len(tensors) - 1)

    template: list = [slot(a, True) if isinstance(a, torch.Tensor) else a for a in args]
    nested = lambda a: slot(a, False) if isinstance(a, torch.Tensor) else a  # noqa: E731
    template = [pytree.tree_map(nested, a) if isinstance(a, (list, tuple, dict)) else a for a in template]
    record = FunctionCall(cls, template, requires_grad)
    CALLS.append(record)
    outputs = python_op(tensors, len(CALLS) - 1)
    return outputs[0] if record.single_output else tuple(outputs)


def _bound_positionally(cls, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments put in their positions, as torch's apply does (so they count among the
    inputs the backward returns gradients for); defaults are bound too for new-style Functions.
    A keyword-only parameter fails as in eager."""
    new_style = _uses_setup_context(cls)
    signature = inspect.signature(cls.forward)
    bound = signature.bind(*args, **kwargs) if new_style else signature.bind(None, *args, **kwargs)
    if new_style:
        bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(f"{full_name(cls)}.forward() got an unexpected keyword argument '{next(iter(bound.kwargs))}'")
    return bound.args if new_style else bound.args[1:]


@contextlib.contextmanager
def keep_functions_opaque(policy: FunctionCapture):
    """Inside: user autograd.Functions are one trainrt::python_op call each (torch.export sees it),
    as `policy` says."""
    global _policy
    _FUNCTION.apply, _policy = classmethod(_apply), policy
    try:
        yield
    finally:
        _FUNCTION.apply, _policy = classmethod(_original_apply), FunctionCapture()
