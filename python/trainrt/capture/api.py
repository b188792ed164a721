"""capture(): a torch.nn.Module and example inputs -> CapturedGraph (ONNX model + bookkeeping).

    captured = capture(model, (x,), {})                 # symbolic dims where the model allows
    captured.accepts([tuple(x.shape)])                  # True: the graph runs inputs of these shapes
    session = trainrt.Session(captured.model.SerializeToString())
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    feeds = ([params[fqn] for _, fqn in captured.param_inputs] + [buffers[fqn] for _, fqn in
             captured.buffer_inputs] + [x])                 # user tensors: pytree leaves of (args, kwargs)

The ONNX model takes parameters and buffers as graph inputs (the engine reads them from the torch
tensors each step, so optimizer updates need no re-capture), then the user's tensors; it returns the
new values of mutated buffers, then the user's outputs flattened. Its user inputs have symbolic
dims where torch.export kept them (export.py): `input_dims` says which, and `accepts` whether inputs
of given shapes can run on this graph (static dims equal, dims of one symbol equal, each symbol in
the range export assumed, and every condition on the sizes that the model's code branched on, as
export recorded it, holding).
"""

from __future__ import annotations

import contextlib
import gc
import re
from dataclasses import dataclass, field
from typing import Any

import onnx
import sympy
import torch
import torch.fx.config
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from trainrt.capture.autograd_function import FunctionCapture
from trainrt.capture.errors import CaptureError, UnsupportedATenOp
from trainrt.capture.export import export_program
from trainrt.capture.shape_guards import failed_guard, shape_guards
from trainrt.capture.symbolic import sym_expr
from trainrt.capture.translator import translate


@dataclass
class CapturedGraph:
    """One captured forward: the ONNX model and how to feed it and rebuild its outputs."""

    model: onnx.ModelProto  # ONNX domain, opset 20
    param_inputs: list[tuple[str, str]]  # (graph input, parameter fqn), graph-input order, tied weights once
    buffer_inputs: list[tuple[str, str]]  # (graph input, buffer fqn)
    user_inputs: list[str]  # graph inputs of the tensor leaves of (args, kwargs), pytree order
    in_spec: pytree.TreeSpec  # pytree spec of (args, kwargs) as given
    non_tensor_inputs: list  # the non-tensor leaves of (args, kwargs): constants baked into the graph
    outputs: list[str]  # graph outputs of the flattened user outputs
    out_spec: pytree.TreeSpec  # rebuilds the user's output structure from `outputs`
    differentiable_outputs: list[bool]  # False for integer and bool outputs
    buffer_mutations: list[tuple[str, str]]  # (graph output, buffer fqn): copy back after each run
    input_dims: list[tuple]  # per user input, per dim: an int (static) or a size expression (str)
    dim_ranges: dict[str, tuple[int, int | None]]  # symbol -> the [lower, upper] export assumed
    # ONNX node name -> checkpoint region: nodes of torch.utils.checkpoint blocks, whose outputs the
    # engine recomputes in the backward (capture/checkpoint_regions.py); empty without checkpointing.
    recompute_regions: dict[str, int]
    # ONNX node name -> repeated layer (transformer block): where the memory levels recompute
    # (capture/layers.py, src/trainrt/plan/layer_recompute.h).
    layers: dict[str, int] = field(default_factory=dict)
    # conditions on the symbols that the trace relied on beyond dim_ranges (`(s1 % 2) == 0`), as
    # Python text over them (capture/shape_guards.py)
    guards: list[str] = field(default_factory=list)
    # (graph output, condition) of a capture specialized on the branches its example took on tensor
    # values: [1] bool outputs after the user outputs, all true when a call took the same branches
    # (capture/branch_checks.py); empty for a capture without such branches
    branch_checks: list[tuple[str, str]] = field(default_factory=list)

    @property
    def dynamic(self) -> bool:
        """True when some user input dim is symbolic; False: the graph has static shapes."""
        return any(isinstance(d, str) for dims in self.input_dims for d in dims)

    def accepts(self, shapes: list[tuple[int, ...]]) -> bool:
        """Whether user inputs of these shapes (pytree order) run on this graph."""
        return self.mismatch(shapes) is None

    def mismatch(self, shapes: list[tuple[int, ...]]) -> str | None:
        """Why user inputs of these shapes (pytree order) do not run on this graph; None when they
        do. Called every step the fast path misses: plain symbols are compared by name, only
        compound expressions go through sympy, and words are made only for a mismatch."""
        if len(shapes) != len(self.input_dims):
            return f"{len(shapes)} tensor inputs, the capture has {len(self.input_dims)}"
        values: dict[str, int] = {}
        where: dict[str, str] = {}
        compound = []
        for i, (dims, shape) in enumerate(zip(self.input_dims, shapes)):
            if len(dims) != len(shape):
                return f"input {i} has rank {len(shape)}, the capture's has {len(dims)}"
            for j, (d, size) in enumerate(zip(dims, shape)):
                if isinstance(d, int):
                    if d != size:
                        why = "torch.export specializes sizes 0 and 1" if d in (0, 1) else \
                            "static shapes, or the model's code specializes that size"
                        return f"input {i} dim {j} is {size}; the capture's is a fixed {d} ({why})"
                elif d.isidentifier():
                    if values.setdefault(d, size) != size:
                        return f"input {i} dim {j} is {size}, but {where[d]} is {values[d]}; the capture has them equal"
                    where.setdefault(d, f"input {i} dim {j}")
                else:
                    compound.append((d, size, f"input {i} dim {j}"))
        for name, (lower, upper) in self.dim_ranges.items():
            value = values.get(name)
            if value is not None and (value < lower or (upper is not None and value > upper)):
                why = " (torch.export specializes sizes 0 and 1)" if value < 2 <= lower else ""
                return (f"{where[name]} is {value}; the capture covers {lower} to "
                        f"{'any size' if upper is None else upper}{why}")
        for d, size, at in compound:
            if sympy.sympify(d).subs(values) != size:
                return f"{at} is {size}; the capture has it equal to {d} of the other inputs"
        guard = failed_guard(self.guards, values)
        if guard is not None:
            sizes = ", ".join(f"{where[name]} = {values[name]}" for name in sorted(values)
                              if re.search(rf"\b{name}\b", guard))
            return (f"the model's code branched on the input sizes when captured (torch.export's guard {guard}), "
                    f"which {sizes or 'these sizes'} break")
        return None


def capture(module: torch.nn.Module, args: tuple, kwargs: dict | None = None,
            symbolic_dims: bool = True, autocast: torch.dtype | None = None,
            functions: FunctionCapture = FunctionCapture()) -> CapturedGraph:
    """Exports module(*args, **kwargs) in its current train/eval mode and translates it to ONNX,
    with symbolic input dims where the model allows them (`symbolic_dims`; else static shapes).
    `autocast` (torch.bfloat16) computes the matmul family in that dtype, the way
    torch.autocast decides (autocast.py); the export itself always runs with autocast off.
    `functions` says which user autograd.Functions stay one PythonOp node (autograd_function.py).

    Every input dim is tried symbolic first; when the translation cannot compute a size that is
    then symbolic (a translation that needs it static), the capture is retried with a symbolic
    batch only (export.py lists the levels).

    Raises CaptureError when torch.export fails or the graph has something the engine cannot run
    (UnsupportedATenOp names the op, the FX node and the source line).

    The garbage collector is paused meanwhile (_gc_paused). torch.export records a stack trace for
    every node it traces, a tenth of gpt2-mini's capture; only
    UnsupportedATenOp's message reads them (the source line). So the capture runs without them, and
    a capture that fails so runs again with them, for that message.
    """
    with _gc_paused():
        try:
            with _stack_traces(False):
                return _capture(module, args, kwargs, symbolic_dims, autocast, functions)
        except UnsupportedATenOp:
            pass
        return _capture(module, args, kwargs, symbolic_dims, autocast, functions)


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector off for the duration. A capture makes many objects that
    live until it ends (the FX graph, its fake tensors, sympy expressions), and each collection then
    walks all of them: on gpt2-mini that was 0.25 s of a 0.3 s translation. What the capture leaves
    as garbage is collected after it, as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def _stack_traces(record: bool):
    """Whether torch's FX tracing records each node's stack trace (torch.fx.config), for the duration."""
    was = torch.fx.config.do_not_emit_stack_traces
    torch.fx.config.do_not_emit_stack_traces = not record
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = was


def _capture(module, args, kwargs, symbolic_dims, autocast, functions) -> CapturedGraph:
    kwargs = dict(kwargs or {})
    args = tuple(args)
    levels = ["all", "batch"] if symbolic_dims else ["none"]
    export_kwargs = kwargs
    for level in levels:
        with torch.autocast("cpu", enabled=False):
            ep = export_program(module, args, export_kwargs, level, functions)
        export_kwargs = _kwargs_exported(ep, export_kwargs)
        user_inputs = _user_input_order(ep, (args, kwargs))
        input_dims = _input_dims(ep, user_inputs)
        try:
            translation = translate(ep, user_inputs, "batch", type(module).__name__, autocast)
            break
        except CaptureError:
            beyond_batch = any(isinstance(d, str) for dims in input_dims for d in dims[1:])
            if level == levels[-1] or not beyond_batch:
                raise
    onnx.checker.check_model(translation.model)
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    return CapturedGraph(
        model=translation.model,
        param_inputs=translation.param_inputs,
        buffer_inputs=translation.buffer_inputs,
        user_inputs=translation.user_inputs,
        in_spec=in_spec,
        non_tensor_inputs=[x for x in leaves if not isinstance(x, torch.Tensor)],
        outputs=translation.outputs,
        out_spec=ep.call_spec.out_spec,
        differentiable_outputs=translation.differentiable_outputs,
        buffer_mutations=translation.buffer_mutations,
        input_dims=input_dims,
        dim_ranges=_dim_ranges(ep),
        recompute_regions=translation.recompute_regions,
        layers=translation.layers,
        branch_checks=translation.branch_checks,
        guards=shape_guards(ep, {d for dims in input_dims for d in dims if isinstance(d, str) and d.isidentifier()}),
    )


def _kwargs_exported(ep: ExportedProgram, kwargs: dict) -> dict:
    """kwargs with use_cache=False where export_program added it (a cache it cannot flatten,
    export.py): the next level exports so at once, sparing a whole trace that would fail again
    (Qwen3.5's and other hybrid linear-attention caches)."""
    exported = (getattr(ep, "example_inputs", None) or ((), {}))[1]
    if "use_cache" not in kwargs and exported.get("use_cache") is False:
        return {**kwargs, "use_cache": False}
    return kwargs


def _input_dims(ep: ExportedProgram, user_inputs: list[str]) -> list[tuple]:
    """Each user input's dims as export traced them: ints, or size expressions as strings."""
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [tuple(int(e) if e.is_number else str(e) for e in map(sym_expr, nodes[name].meta["val"].shape))
            for name in user_inputs]


def _dim_ranges(ep: ExportedProgram) -> dict[str, tuple[int, int | None]]:
    """The value range export assumed for each input dim's symbol (sizes 0 and 1 are specialized, so
    >= 2); unbacked symbols (a value read with .item()) are no input's and may be unbounded below."""
    ranges = {}
    for symbol, vr in ep.range_constraints.items():
        if isinstance(symbol, sympy.Symbol) and vr.lower.is_Integer:  # torch's -int_oo is no Integer
            upper = vr.upper
            ranges[str(symbol)] = (int(vr.lower), None if not upper.is_finite or upper > 2**62 else int(upper))
    return ranges


def _user_input_order(ep: ExportedProgram, inputs: Any) -> list[str]:
    """The user tensor placeholders of ep in the pytree order of `inputs` as given.

    torch.export may order keyword arguments by forward's signature; leaves are matched by their
    key path, which both orders share.
    """
    user_specs = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    ep_paths = [p for p, _ in pytree.tree_flatten_with_path(
        pytree.tree_unflatten(list(range(ep.call_spec.in_spec.num_leaves)), ep.call_spec.in_spec))[0]]
    if len(ep_paths) != len(user_specs):
        raise CaptureError(f"torch.export lists {len(user_specs)} user inputs for {len(ep_paths)} input leaves")
    placeholder_of = {path: spec.arg.name for path, spec in zip(ep_paths, user_specs)}
    order = []
    for path, leaf in pytree.tree_flatten_with_path(inputs)[0]:
        if isinstance(leaf, torch.Tensor):
            if path not in placeholder_of:
                raise CaptureError(f"input {pytree.keystr(path)} has no placeholder in the exported graph")
            order.append(placeholder_of[path])
    return order
