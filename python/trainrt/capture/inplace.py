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
                                         (select and select_scatter alike, and chains of them:
                                         `shifted[:, 1:] = ids[:, :-1]` is a slice of a slice)

provided nothing else sees the written storage: x (or the base b) is the output of an op that
makes a new tensor (not a view, not a graph input), and no other view of it or write to it comes
before the op but views the op itself reads (Qwen3.5's interleaved mrope,
`freqs[0][..., idx] = freqs[1][..., idx]`). Later uses of a view in the chain read that view taken
again of b2, so a later write through it reaches b2 too (mrope writes `freqs[0]` twice).

The one write of a module buffer that BatchNorm makes in training is local too, and functionalizing
it here spares the retrace, which costs more than the export itself (the quick suite's CNN: 0.6 s
against 0.2 s):

    num_batches_tracked.add_(1)              ->  n2 = add(num_batches_tracked, 1)
    batch_norm(x, w, b, mean, var, True, ..) ->  (y, _, _, mean2, var2) =
                                                 _native_batch_norm_legit_functional(x, w, b, mean, var, True, ..)

later reads of the buffer read the new value, and the new value becomes the buffer mutation output
that the functionalized program would list (the graph signature gets it). Only for a buffer written
once, by one of these ops, with no view of it: a view would see the write. Any other in-place op is
left to run_decompositions.

    if functionalize_fresh_writes(ep.graph) | functionalize_buffer_writes(ep):
        ep.graph_module.recompile()
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, OutputSpec, TensorArgument

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
    """node makes a new tensor: an ATen call whose output aliases no input, or an output of such
    a call with several (topk's values)."""
    if isinstance(node, torch.fx.Node) and node.target is operator.getitem:
        node = node.args[0]
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
        """No view of x nor write to x comes before node, but `allowed` ones and views that are
        only read, and only before node (PLBart's `t[:, 1:] = t[:, :-1].clone()`)."""
        return not any(self.order[u] < self.order[node] and _aliases(u) and u not in allowed
                       and not self.read_before(u, node) for u in x.users if u is not node)

    def read_before(self, view: torch.fx.Node, node: torch.fx.Node) -> bool:
        """view is a view (no write) whose users all come before node and make new tensors or are
        such views themselves (a slice of a slice), or are node reading it as a source (mrope's
        `freqs[0][..., idx] = freqs[1][..., idx]`: the functional op reads it before the write, as
        torch's functionalization does)."""
        target = view.target
        if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
            return False
        return all(u is node and node.args[0] is not view
                   or self.order[u] < self.order[node] and u.op == "call_function"
                   and (not _aliases(u) or self.read_before(u, node)) for u in view.users)

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

    def view_chain(self, x, node: torch.fx.Node) -> list[torch.fx.Node] | None:
        """[x, its base, ..., a fresh tensor] when x is the fresh tensor or reached from it by slices
        and selects only, each seen before node by nothing but the next view down; else None."""
        chain = [x]
        while isinstance(chain[-1], torch.fx.Node) and chain[-1].target in _SCATTERS:
            chain.append(chain[-1].args[0])
        if not _fresh(chain[-1]):
            return None
        seen_by = [()] + [(view,) for view in chain[:-1]]  # each may be seen by the view taken of it
        return chain if all(self.untouched_before(v, node, allowed) for v, allowed in zip(chain, seen_by)) else None

    def retake_views(self, chain: list[torch.fx.Node], base: torch.fx.Node, node: torch.fx.Node) -> None:
        """Later uses of the views in chain[:-1] read the same views taken again of `base`, the
        written base's new value, so that a later write through one of them reaches the base too
        (mrope's `freqs_t = freqs[0]`, written through two slices in turn)."""
        later = [i for i, view in enumerate(chain[:-1]) if any(self.order[u] > self.order[node] for u in view.users)]
        for view in reversed(chain[min(later, default=len(chain)):-1]):  # from the base's own view down
            base = self.insert(node, view.target, (base, *view.args[1:]), view.kwargs)
            base.meta["val"] = view.meta["val"]
            self.redirect_later(view, base, node)

    def rewrite(self, node: torch.fx.Node) -> bool:
        functional = _functional(node.target)
        chain = self.view_chain(node.args[0], node) if functional is not None and node.args else None
        if chain is None:
            return False
        value = self.insert(node, functional, node.args, node.kwargs)  # x's new contents
        new = {chain[0]: value}
        for view, base in zip(chain, chain[1:]):  # written back up through each view
            new[base] = self.insert(node, _SCATTERS[view.target], (base, new[view], *view.args[1:]), view.kwargs)
            new[base].meta["val"] = base.meta["val"]  # the scatter has its base's shape, not the write's
        self.redirect_later(chain[-1], new[chain[-1]], node)  # chain == [x]: value itself
        self.retake_views(chain, new[chain[-1]], node)
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


_BATCH_NORM_STATS = (3, 4)  # aten.batch_norm's running_mean, running_var arguments


def _updates_running_stats(node: torch.fx.Node) -> bool:
    """aten.batch_norm in training with running stats (it writes them in place)."""
    return node.target == aten.batch_norm.default and node.args[5] is True and node.args[3] is not None


def _written_buffers(ep: ExportedProgram) -> dict[torch.fx.Node, tuple[str, torch.fx.Node]] | None:
    """buffer placeholder -> (its fqn, the node writing it) for the buffers written in place; None
    when one of them is written in another form than functionalize_buffer_writes takes: more than
    once, with a view of it besides, by an op without a functional overload, or as a running stat
    beside a stat that is not a buffer."""
    buffers = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.kind == InputKind.BUFFER}
    written = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in buffers:
            continue
        writes = [u for u in node.users if _updates_running_stats(u)
                  or isinstance(u.target, torch._ops.OpOverload) and u.target._schema.is_mutable]
        if not writes:
            continue
        (write,) = writes if len(writes) == 1 else (None,)
        views = [u for u in node.users if u is not write and _aliases(u)]
        in_place = write is not None and _functional(write.target) is not None and write.args[0] is node \
            and node not in write.args[1:]
        if views or not (in_place or write is not None and _updates_running_stats(write)):
            return None
        written[node] = (buffers[node.name], write)
    for _, write in written.values():
        if _updates_running_stats(write) and any(written.get(write.args[i], (None, None))[1] is not write
                                                 for i in _BATCH_NORM_STATS):
            return None
    return written


def functionalize_buffer_writes(ep: ExportedProgram) -> bool:
    """Rewrites BatchNorm's in-place buffer writes in ep's graph to functional ops whose results are
    buffer mutation outputs of the signature; True when it changed something. Changes nothing when
    some buffer write is of another form (run_decompositions then functionalizes them all)."""
    written = _written_buffers(ep)
    if not written:
        return False
    rewriter = _Rewriter(ep.graph)
    new_value: dict[torch.fx.Node, torch.fx.Node] = {}  # buffer placeholder -> its value after the write
    for node in dict.fromkeys(write for _, write in written.values()):  # a BatchNorm writes two buffers
        if _updates_running_stats(node):
            x, weight, bias, mean, var, training, momentum, eps = node.args[:8]
            functional = rewriter.insert(node, aten._native_batch_norm_legit_functional.default,
                                         (x, weight, bias, mean, var, training, momentum, eps))
            # (y, save_mean, save_rstd, new running_mean, new running_var); the saved pair is unused
            functional.meta["val"] = (node.meta["val"], mean.meta["val"], mean.meta["val"], mean.meta["val"],
                                      var.meta["val"])
            y, new_mean, new_var = (rewriter.insert(node, operator.getitem, (functional, i)) for i in (0, 3, 4))
            for out, i in ((y, 0), (new_mean, 3), (new_var, 4)):
                out.meta["val"] = functional.meta["val"][i]
            node.replace_all_uses_with(y)
            updates = {mean: new_mean, var: new_var}
        else:
            value = rewriter.insert(node, _functional(node.target), node.args, node.kwargs)
            node.replace_all_uses_with(value)
            updates = {node.args[0]: value}
        for old, new in updates.items():
            rewriter.redirect_later(old, new, node)
            new_value[old] = new
        ep.graph.erase_node(node)
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    output.args = ((*new_value.values(), *output.args[0]),)
    ep.graph_signature.output_specs[:0] = [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(v.name),
                                                      written[b][0]) for b, v in new_value.items()]
    return True
