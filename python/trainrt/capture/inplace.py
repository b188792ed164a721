"""Functional forms of the in-place ATen ops that write a tensor the forward has just made.

torch.export's training IR keeps in-place ops, and export.py functionalizes graphs that have them
with `run_decompositions`, a retrace of the whole program. In torch 2.13 that retrace fails on
Hugging Face models whose DynamicCache makes fresh empty tensors: it lifts them again under new
names that it does not carry into the new program ("Constant tensor lifted_tensor_0 is not in the
constants dictionary"). The in-place ops of those models mostly write a value the forward itself
just made: CTRL's `inputs_embeds *= sqrt(d)` on the embedding's output, Falcon's
`mlp_output += attention_output`, the MoE experts' `out.index_put_(...)` into an empty_like. For
those the functional form is local and exact:

    y = x.op_(args)    ->    y2 = op(x, args); every later use of x (and of y) reads y2

provided nothing else sees x's storage: x is the output of an op that makes a new tensor (not a
view, not a graph input), and no view of x or other in-place write to it comes before the op. Any
other in-place op is left to run_decompositions.

    if functionalize_fresh_writes(ep.graph):
        ep.graph_module.recompile()
"""

from __future__ import annotations

import torch
import torch.fx


def _aliases(node: torch.fx.Node) -> bool:
    """True when node's output may share storage with an input (a view, an in-place op)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return node.op == "call_function"  # getitem and other Python calls: assume so
    return any(r.alias_info is not None for r in target._schema.returns)


def _functional(target: torch._ops.OpOverload):
    """aten.add_.Tensor -> aten.add.Tensor, or None when there is no such overload."""
    name = target.overloadpacket.__name__
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _writes_fresh(node: torch.fx.Node, order: dict[torch.fx.Node, int]) -> bool:
    """node is an in-place op on a tensor made by a non-aliasing op, with no alias of it before node."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    if not schema.is_mutable or node.target == torch.ops.aten.detach_.default or not node.args:
        return False
    written = [a for a, arg in zip(schema.arguments, node.args) if a.alias_info is not None and a.alias_info.is_write]
    if len(written) != 1 or written[0] is not schema.arguments[0]:
        return False  # the write must be to self only
    x = node.args[0]
    if not isinstance(x, torch.fx.Node) or x.op != "call_function" or _aliases(x):
        return False
    return not any(order[u] < order[node] and _aliases(u) for u in x.users if u is not node)


def functionalize_fresh_writes(graph: torch.fx.Graph) -> bool:
    """Rewrites each in-place write of a fresh tensor in `graph` to its functional form; True when
    it changed something."""
    changed = False
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        functional = _functional(node.target) if isinstance(node.target, torch._ops.OpOverload) else None
        if functional is None or not _writes_fresh(node, order):
            continue
        x = node.args[0]
        with graph.inserting_before(node):
            new = graph.call_function(functional, node.args, node.kwargs)
        new.meta = dict(node.meta)
        order[new] = order[node]  # it takes the write's place
        later = [u for u in x.users if u is not node and order[u] > order[node]]
        for user in later:
            user.replace_input_with(x, new)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        changed = True
    return changed
