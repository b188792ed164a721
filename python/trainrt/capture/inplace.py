"""Functional forms of the in-place ATen ops that write a tensor the forward has just made.

torch.export's training IR keeps in-place ops, and export.py functionalizes graphs that have them
with `run_decompositions`, a retrace of the whole program. In torch 2.13 that retrace fails on
Hugging Face models whose DynamicCache makes fresh empty tensors: it lifts them again under new
names that it does not carry into the new program ("Constant tensor lifted_tensor_0 is not in the
constants dictionary"). The in-place ops of those models mostly write a value the forward itself
just made: CTRL's `inputs_embeds *= sqrt(d)` on the embedding's output, Falcon's
`mlp_output += attention_output`, the MoE experts' `out.index_put_(...)` into an empty_like,
DeepSeek's `key_states[..., :d].copy_(k)` into a new_empty. For those the functional form is local
and exact:

    y = x.op_(args)                  ->  y2 = op(x, args); later uses of x (and of y) read y2
    y = b.slice(d, s, e).op_(args)   ->  y2 = op(b.slice(d, s, e), args);
                                         b2 = slice_scatter(b, y2, d, s, e); later uses of b read b2
                                         (select and select_scatter alike)

provided nothing else sees the written storage: x (or the base b) is the output of an op that
makes a new tensor (not a view, not a graph input), and no other view of it or write to it comes
before the op. Any other in-place op is left to run_decompositions.

    if functionalize_fresh_writes(ep.graph):
        ep.graph_module.recompile()
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten

# View -> the scatter that writes a value back through it, with the view's own arguments.
_SCATTERS = {aten.slice.Tensor: aten.slice_scatter.default, aten.select.int: aten.select_scatter.default}


def _aliases(node: torch.fx.Node) -> bool:
    """True when node's output may share storage with an input (a view, an in-place op)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return node.op == "call_function"  # getitem and other Python calls: assume so
    return any(r.alias_info is not None for r in target._schema.returns)


def _fresh(node) -> bool:
    """node makes a new tensor: an ATen call whose output aliases no input."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and not _aliases(node)


def _functional(target):
    """aten.add_.Tensor -> aten.add.Tensor, or None (not an in-place ATen op, or no such overload)."""
    if not isinstance(target, torch._ops.OpOverload) or target == aten.detach_.default:
        return None
    schema = target._schema
    name = target.overloadpacket.__name__
    if not schema.is_mutable or not name.endswith("_") or name.startswith("_"):
        return None
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if written != [schema.arguments[0]]:
        return None  # the write must be to self only
    packet = getattr(aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


class _Rewriter:
    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph
        self.order = {n: i for i, n in enumerate(graph.nodes)}

    def untouched_before(self, x: torch.fx.Node, node: torch.fx.Node, allowed: tuple = ()) -> bool:
        """No view of x nor write to x comes before node, but `allowed` ones."""
        return not any(self.order[u] < self.order[node] and _aliases(u) and u not in allowed
                       for u in x.users if u is not node)

    def insert(self, node: torch.fx.Node, target, args, kwargs=None) -> torch.fx.Node:
        """A call placed just before node, taking its place in the order."""
        with self.graph.inserting_before(node):
            new = self.graph.call_function(target, tuple(args), kwargs or {})
        new.meta = dict(node.meta)
        self.order[new] = self.order[node]
        return new

    def redirect_later(self, old: torch.fx.Node, new: torch.fx.Node, node: torch.fx.Node) -> None:
        """Uses of old after node read new."""
        for user in [u for u in old.users if u is not node and self.order[u] > self.order[node]]:
            user.replace_input_with(old, new)

    def rewrite(self, node: torch.fx.Node) -> bool:
        functional = _functional(node.target)
        if functional is None or not node.args:
            return False
        x = node.args[0]
        if _fresh(x) and self.untouched_before(x, node):
            value = self.insert(node, functional, node.args, node.kwargs)
            self.redirect_later(x, value, node)
        elif (isinstance(x, torch.fx.Node) and x.target in _SCATTERS and _fresh(base := x.args[0])
              and self.untouched_before(x, node) and self.untouched_before(base, node, allowed=(x,))):
            value = self.insert(node, functional, node.args, node.kwargs)
            written = self.insert(node, _SCATTERS[x.target], (base, value, *x.args[1:]), x.kwargs)
            self.redirect_later(base, written, node)
            self.redirect_later(x, value, node)
        else:
            return False
        node.replace_all_uses_with(value)
        self.graph.erase_node(node)
        return True


def functionalize_fresh_writes(graph: torch.fx.Graph) -> bool:
    """Rewrites each in-place write of a fresh tensor in `graph` to its functional form; True when
    it changed something."""
    rewriter = _Rewriter(graph)
    changed = False
    for node in list(graph.nodes):
        changed |= rewriter.rewrite(node)
    return changed
