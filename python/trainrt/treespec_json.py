"""Pytree specs and plain values as JSON data, read back without importing or running anything named
in the data. The export cache (export_cache.py) stores a capture's in_spec and out_spec this way.

    data = spec_to_json(spec)                 # raises NotJSONData for a spec it cannot write
    assert spec_from_json(data) == spec       # node types resolved among torch's registered pytree types

A spec is written node by node: a leaf is `null`; a node is {"type", "context", "children"}, its type
named `module.qualname`. Reading resolves that name only among the types registered in torch's pytree
now (`SUPPORTED_NODES`: tuple, list, dict, namedtuple, OrderedDict, ..., and what libraries registered,
such as transformers' ModelOutput classes and DynamicCache), never by importing the module the name
gives: a file in a cache directory must not choose what code a training process loads.
torch's own `treespec_loads` needs a serialized name registered for each type (DynamicCache has none)
and `pickle` would run whatever the file names, so neither fits.

Contexts and other values are JSON with tags where JSON has no spelling: None, bool, int, float, str
and list as themselves, {"tuple": [...]}, {"dict": [[key, value], ...]} (any keys, in order) and
{"type": "module.qualname"} for a class (a namedtuple's context, a defaultdict's default_factory),
resolved among the registered types and a few builtins. Anything else raises NotJSONData.
"""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

# Classes a context may name besides the registered node types: a defaultdict's usual factories.
_BUILTIN_TYPES = (bool, int, float, str, list, tuple, dict, set)


class NotJSONData(TypeError):
    """A spec or value that this encoding cannot write (or read back as the same thing)."""


def _qualified_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _registered_types() -> dict[str, Any]:
    """The pytree node types registered now, by qualified name (read at each call: libraries register
    their types as they are imported). namedtuple's entry is the `collections.namedtuple` function."""
    return {_qualified_name(t): t for t in pytree.SUPPORTED_NODES}


def _context_types() -> dict[str, Any]:
    return {**{_qualified_name(t): t for t in _BUILTIN_TYPES}, **_registered_types()}


def _name_of(cls, known: dict[str, Any], what: str) -> str:
    name = _qualified_name(cls)
    if known.get(name) is not cls:  # unregistered, or another registered type has its name
        raise NotJSONData(f"{what} {name} is not a type registered in torch's pytree")
    return name


def spec_to_json(spec: pytree.TreeSpec) -> Any:
    """The spec as JSON data; NotJSONData names the node type or context it cannot write."""
    return _spec_to_json(spec, _registered_types(), _context_types())


def _spec_to_json(spec, node_types, context_types):
    if spec.is_leaf():
        return None
    return {"type": _name_of(spec.type, node_types, "pytree node type"),
            "context": _value_to_json(spec.context, context_types),
            "children": [_spec_to_json(c, node_types, context_types) for c in spec.children()]}


def spec_from_json(data: Any) -> pytree.TreeSpec:
    """The spec spec_to_json wrote. Raises ValueError for data it did not write or a node type not
    registered in this process."""
    return _spec_from_json(data, _registered_types(), _context_types())


def _spec_from_json(data, node_types, context_types):
    if data is None:
        return pytree.treespec_leaf()
    if not isinstance(data, dict) or data.keys() != {"type", "context", "children"} \
            or not isinstance(data["children"], list):
        raise ValueError(f"not a pytree spec node: {data!r:.80}")
    node_type = node_types.get(data["type"]) if isinstance(data["type"], str) else None
    if node_type is None:
        raise ValueError(f"pytree node type {data['type']!r:.80} is not registered in this process")
    return pytree.TreeSpec(node_type, _value_from_json(data["context"], context_types),
                           [_spec_from_json(c, node_types, context_types) for c in data["children"]])


def value_to_json(value: Any) -> Any:
    """A plain value (a context, a constant input) as tagged JSON data; NotJSONData for others."""
    return _value_to_json(value, _context_types())


def value_from_json(data: Any) -> Any:
    """The value value_to_json wrote; ValueError for data it did not write."""
    return _value_from_json(data, _context_types())


def _value_to_json(value, types):
    kind = type(value)  # exact types: a subclass (IntEnum, a str subclass) would come back as its base
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [_value_to_json(v, types) for v in value]
    if kind is tuple:
        return {"tuple": [_value_to_json(v, types) for v in value]}
    if kind is dict:
        return {"dict": [[_value_to_json(k, types), _value_to_json(v, types)] for k, v in value.items()]}
    if isinstance(value, type) or any(value is t for t in types.values()):
        return {"type": _name_of(value, types, "class")}
    raise NotJSONData(f"{kind.__qualname__} {value!r:.60} is not JSON data")


def _value_from_json(data, types):
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_value_from_json(v, types) for v in data]
    if type(data) is dict and len(data) == 1:
        (tag, body), = data.items()
        if tag == "tuple" and type(body) is list:
            return tuple(_value_from_json(v, types) for v in body)
        if tag == "dict" and type(body) is list and all(type(kv) is list and len(kv) == 2 for kv in body):
            return {_value_from_json(k, types): _value_from_json(v, types) for k, v in body}
        if tag == "type" and type(body) is str and body in types:
            return types[body]
    raise ValueError(f"not a value this encoding wrote: {data!r:.80}")
