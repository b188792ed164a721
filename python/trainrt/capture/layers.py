"""The model's repeated layers: which FX node belongs to which transformer block (or any repeated block).

A layer is a submodule that sits at an integer index of a container (`h.3` of a ModuleList,
`layer.1` of a Sequential) among at least two siblings of its class: GPT-2's `transformer.h.N`,
BERT's `encoder.layer.N`, Llama's `model.layers.N`. A node belongs to the outermost layer in its
`nn_module_stack` (torch.export keeps it in each node's meta). The engine's memory levels recompute
inside each layer (src/trainrt/plan/layer_recompute.h); capture only says where the layers are.

    layers = repeated_layers(ep.graph.nodes)     # FX node -> layer index, in order of first appearance
"""

from __future__ import annotations

import collections
import re

import torch

_INDEXED = re.compile(r"^(.*)\.(\d+)$")


def _stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """(module path, class name) from the root outwards in, as torch.export recorded them."""
    return [(path, str(cls)) for path, cls in (node.meta.get("nn_module_stack") or {}).values()]


def repeated_layers(nodes) -> dict[torch.fx.Node, int]:
    """Each call_function node inside a repeated layer -> that layer's index (layers numbered in the
    order their first node comes)."""
    nodes = [n for n in nodes if n.op == "call_function"]
    siblings: dict[tuple[str, str], set[str]] = collections.defaultdict(set)  # (container, class) -> layers
    for node in nodes:
        for path, cls in _stack(node):
            if (m := _INDEXED.match(path)) is not None:
                siblings[(m.group(1), cls)].add(path)
    repeated = {path for layers in siblings.values() if len(layers) >= 2 for path in layers}
    index: dict[str, int] = {}
    out: dict[torch.fx.Node, int] = {}
    for node in nodes:
        layer = next((path for path, _ in _stack(node) if path in repeated), None)
        if layer is not None:
            out[node] = index.setdefault(layer, len(index))
    return out
