"""Captures shared by the RTModules of one process: a second RTModule of a module built like one
captured before reuses that capture instead of running torch.export and the translation again.

    key = shared_captures.key_of(module, schema_key)     # None: this module is not shared
    captured = shared_captures.find(key, shapes) or capture(...)
    shared_captures.remember(key, captured)

A capture holds no weights: parameters and buffers are graph inputs named by their fqn, and each
RTModule binds its own module's tensors to them at every call (rtmodule._Engine.module_tensors),
so two models of one structure with different weights share a graph and each gets its own
gradients. The key is everything the traced graph depends on but the code of the classes:
- each submodule's class (the class object itself, so its forward's code), in module order;
- each submodule's plain attributes (ints, floats, strings, dtypes, training flags, and lists,
  tuples, dicts of them; a config with `to_dict`, as Hugging Face's, by its contents; a plain
  tensor attribute, which torch.export lifts into the graph as a constant, by its bytes): what
  a forward reads besides its tensors, such as the number of attention heads, which no
  parameter shape shows;
- the names, dtypes, shapes and requires_grad of the parameters and buffers;
- the caller's schema key (mode, autocast, input structure, dtypes, ranks, non-tensor values,
  which inputs require grad, which autograd.Functions stay opaque).
A module with an attribute of another kind (an arbitrary object, a closure), with module hooks
(they run inside the export: ZeRO-3, FSDP, a user's), or whose graph has PythonOp nodes (their
records hold the first module's call arguments) is not shared: it is captured as before.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import types

import onnx
import torch

from trainrt.capture import CapturedGraph

# Structures kept, oldest dropped first: a process builds few distinct models (a training model,
# its eval mode, a reference copy); the bound keeps a sweep over many from holding every graph.
_MAX_KEYS = 32
_captures: dict[tuple, list[CapturedGraph]] = {}
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_CONTAINERS = ("_parameters", "_buffers", "_modules")  # keyed by the walk and the tensor list instead


class _NotPlain(Exception):
    """An attribute whose value the key cannot describe by content."""


def key_of(module: torch.nn.Module, schema_key) -> tuple | None:
    """The key of module's capture under `schema_key` (hashable), or None when it is not shared."""
    if any(getattr(torch.nn.modules.module, f"_global{h}") for h in _HOOKS):  # register_module_forward_hook & co
        return None
    parts = []
    try:
        for name, m in module.named_modules(remove_duplicate=False):
            if any(getattr(m, h, None) for h in _HOOKS):
                return None
            attrs = tuple((k, _plain(v)) for k, v in sorted(vars(m).items())
                          if k not in _CONTAINERS and k not in _HOOKS)
            parts.append((name, type(m), attrs))
    except Exception:  # noqa: BLE001  (_NotPlain, or a user object's to_dict failing, or a cycle: not shared)
        return None
    tensors = tuple((name, t.dtype, tuple(t.shape), t.requires_grad)
                    for name, t in [*module.named_parameters(remove_duplicate=False),
                                    *module.named_buffers(remove_duplicate=False)])
    # Tied weights are one graph input: which names share a tensor is structure too.
    ids = {}
    ties = tuple(ids.setdefault(id(t), len(ids)) for _, t in [*module.named_parameters(remove_duplicate=False),
                                                              *module.named_buffers(remove_duplicate=False)])
    return (tuple(parts), tensors, ties, schema_key)


def _plain(value):
    """A hashable description of an attribute's value by content; _NotPlain when there is none."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, complex, torch.dtype, torch.device,
                                           torch.memory_format, torch.layout, enum.Enum)):
        return (type(value), value)
    if isinstance(value, torch.Tensor):
        if isinstance(value, torch.nn.Parameter) or value.device.type != "cpu" or value.numel() > 1 << 16:
            raise _NotPlain
        data = value.detach().reshape(-1).contiguous().view(torch.uint8)
        return (torch.Tensor, value.dtype, tuple(value.shape), hashlib.sha256(data.numpy().tobytes()).hexdigest())
    if isinstance(value, (tuple, list, set, frozenset)):
        items = tuple(_plain(v) for v in value)
        return (type(value), tuple(sorted(items, key=repr)) if isinstance(value, (set, frozenset)) else items)
    if isinstance(value, dict):
        return (type(value), tuple((_plain(k), _plain(v)) for k, v in value.items()))
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        # A module-level function or class is named by where it lives; a closure or a lambda is not.
        if getattr(value, "__closure__", None) or "<" in value.__qualname__:
            raise _NotPlain
        return ("function", value.__module__, value.__qualname__)
    if dataclasses.is_dataclass(value):
        return (type(value), _plain(dataclasses.asdict(value)))
    if callable(getattr(value, "to_dict", None)) and not isinstance(value, torch.nn.Module):
        return (type(value), _plain(value.to_dict()))
    raise _NotPlain


def find(key: tuple | None, shapes: list[tuple[int, ...]], exclude: tuple = ()) -> CapturedGraph | None:
    """A capture remembered under `key` that runs user inputs of these shapes, or None; not one of
    `exclude` (captures whose data branches this call does not take, capture/branch_checks.py)."""
    if key is None:
        return None
    return next((c for c in _captures.get(key, []) if c.accepts(shapes) and not any(c is x for x in exclude)), None)


def remember(key: tuple | None, captured: CapturedGraph) -> None:
    """Keeps `captured` for the next RTModule with this key (not a graph with PythonOps)."""
    if key is None or any(n.op_type == "PythonOp" for n in _nodes(captured.model.graph)):
        return
    if key not in _captures and len(_captures) >= _MAX_KEYS:
        del _captures[next(iter(_captures))]
    _captures.setdefault(key, []).append(captured)


def _nodes(graph: onnx.GraphProto):
    """The nodes of `graph` and of its subgraphs."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _nodes(sub)
