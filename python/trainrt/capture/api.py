"""capture(): a torch.nn.Module and example inputs -> CapturedGraph (ONNX model + bookkeeping).

    captured = capture(model, (x,), {}, dynamic_batch=True)
    session = trainrt.Session(captured.model.SerializeToString())
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    feeds = ([params[fqn] for _, fqn in captured.param_inputs] + [buffers[fqn] for _, fqn in
             captured.buffer_inputs] + [x])                 # user tensors: pytree leaves of (args, kwargs)

The ONNX model takes parameters and buffers as graph inputs (the engine reads them from the torch
tensors each step, so optimizer updates need no re-capture), then the user's tensors; it returns the
new values of mutated buffers, then the user's outputs flattened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from trainrt.capture.errors import CaptureError
from trainrt.capture.export import export_program
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
    dynamic: bool  # True when dim 0 of the batch inputs is symbolic ("batch"); False: static shapes


def capture(module: torch.nn.Module, args: tuple, kwargs: dict | None = None,
            dynamic_batch: bool = True) -> CapturedGraph:
    """Exports module(*args, **kwargs) in its current train/eval mode and translates it to ONNX.

    Raises CaptureError when torch.export fails or the graph has something the engine cannot run
    (UnsupportedATenOp names the op, the FX node and the source line).
    """
    kwargs = dict(kwargs or {})
    args = tuple(args)
    ep, dynamic = export_program(module, args, kwargs, dynamic_batch)
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    user_inputs = _user_input_order(ep, (args, kwargs))
    translation = translate(ep, user_inputs, "batch" if dynamic else None, type(module).__name__)
    onnx.checker.check_model(translation.model)
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
        dynamic=dynamic,
    )


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
