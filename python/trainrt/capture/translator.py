"""The FX walker: translates an ExportedProgram's ATen graph into one ONNX graph.

Stage invariants:
- in: a functional ATen graph (export.py functionalizes graphs with in-place ops), placeholders ordered as
  torch.export orders them (parameters, buffers, lifted constants, user inputs);
- out: graph inputs = parameters, buffers, user tensor inputs (in the order the caller gives);
  graph outputs = buffer mutations, then user outputs; lifted constants are initializers;
- every FX value maps to a translated value (context.TensorValue, a SymInt, or a Python constant);
  every ATen op without a translation (or in a form its translation refuses) is recorded and the walk goes
  on, skipping the nodes that read an untranslated value; at the end one UnsupportedATenOp names them all,
  each with its node and source line;
- under mixed precision (autocast.py) every FX value gets the dtype eager autocast gives it (the
  matmul family's outputs are bf16, and so is what is computed from them up to an f32 op or a
  promotion); without it, the dtype torch.export gave it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import onnx
import sympy
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind, TensorArgument

from trainrt.capture.aten_ops import ATEN_OPS
from trainrt.capture.autocast import Autocast, dtypes_of
from trainrt.capture.branch_checks import branch_conditions, is_specialized
from trainrt.capture.checkpoint_regions import RECOMPUTE_KEY
from trainrt.capture.context import OpContext, TensorValue, bind_args, op_name, source_line
from trainrt.capture.errors import CaptureError, UnsupportedATenOp, unsupported_ops
from trainrt.capture.layers import repeated_layers
from trainrt.capture.onnx_builder import GraphBuilder
from trainrt.capture.ops_complex import COMPLEX_OPS, touches_complex
from trainrt.capture.symbolic import SymbolTable

aten = torch.ops.aten

# ATen ops that return sizes (their FakeTensor value is the SymInt itself).
_SIZE_OPS = {aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int, aten.sym_storage_offset.default}
# Checks torch.export leaves in the graph; they compute nothing the engine needs.
_ASSERTS = {aten._assert_scalar.default, aten._assert_tensor_metadata.default,
            aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default, aten._assert_async.msg}
# Tensor to Python number (x.item(), each element of x.tolist()).
_ITEMS = {aten.item.default, aten._local_scalar_dense.default}
# Values of Python arithmetic on sizes (operator.mul on SymInts, ...); the FakeTensor value carries
# the expression.
_SIZE_TYPES = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)
# The value of a node that was not translated (its op is unsupported, or it reads such a value).
_UNTRANSLATED = object()



# Ops that return their input itself when they change nothing: `x.to(x.dtype)`, `x.contiguous()`
# of a contiguous x, `x.type_as(x)`. Inside a torch.no_grad() block the result is then still x.
_SELF_WHEN_NO_OP = {torch.ops.aten.to.dtype, torch.ops.aten.to.dtype_layout, torch.ops.aten.to.device,
                    torch.ops.aten.to.other, torch.ops.aten.contiguous.default, torch.ops.aten.type_as.default}


def _returns_an_input(node) -> bool:
    """Whether the fx `node` (a no_grad block's output) is one of the block's placeholders, directly
    or through ops that return their input itself because they change neither dtype nor layout."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _SELF_WHEN_NO_OP:
        source = node.args[0]
        out, inp = node.meta.get("val"), getattr(source, "meta", {}).get("val")
        if not (isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and out.dtype == inp.dtype
                and out.shape == inp.shape and out.stride() == inp.stride()):
            return False
        node = source
    return isinstance(node, torch.fx.Node) and node.op == "placeholder"

class _CheckedOnly:
    """Which values only runtime checks read, through their sizes, as Python numbers, or through
    functional ops computed for the checks alone: XLM's `assert lengths.max().item() <= slen`,
    BART's `len(torch.unique_consecutive(eos_counts)) > 1`, ProphetNet's `assert torch.all(ids >=
    0).item()` and I-BERT's `assert x.isnan().sum() == 0` (python_asserts.py). Export leaves them
    as asserts on unbacked symbols, which the engine does not need (the asserts are dropped), so
    those values need no translation; a value any other reader takes is translated.

    One pass per graph, from its output back (a node's readers come after it), so that each
    question is a lookup: `checked_only(node)`."""

    def __init__(self, asserts_kept: bool = False) -> None:
        self._for_checks: dict[torch.fx.Node, bool] = {}  # node -> computed only for checks
        self._graphs: set[torch.fx.Graph] = set()
        # A capture specialized on data branches keeps its asserts (branch_checks.py): what they
        # read is translated.
        self._asserts_kept = asserts_kept

    def __call__(self, node: torch.fx.Node) -> bool:
        if node.graph not in self._graphs:
            self._graphs.add(node.graph)
            for n in reversed(node.graph.nodes):
                self._for_checks[n] = self._computes_for_checks(n)
        return bool(node.users) and all(self._for_checks[u] for u in node.users)

    def _computes_for_checks(self, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target in _ASSERTS:
            return not (self._asserts_kept and node.target is aten._assert_scalar.default)
        read_for_checks = all(self._for_checks[u] for u in node.users)
        if node.target is operator.getitem or node.target in _SIZE_OPS or node.target in _ITEMS or (
                not isinstance(node.target, torch._ops.OpOverload) and isinstance(node.meta.get("val"), _SIZE_TYPES)):
            return read_for_checks  # an output of a value, its size, a number, arithmetic on those
        # A functional ATen op read by checks alone (one nobody reads is translated, as before).
        return (read_for_checks and bool(node.users) and isinstance(node.target, torch._ops.OpOverload)
                and not node.target._schema.is_mutable)


class _ReadsUntranslated(Exception):
    """A node's argument is an untranslated value: the node is skipped, its op was already reported."""


@dataclass
class Translation:
    """The ONNX model and how its inputs and outputs relate to the module."""

    model: onnx.ModelProto
    param_inputs: list[tuple[str, str]]
    buffer_inputs: list[tuple[str, str]]
    user_inputs: list[str]
    outputs: list[str]
    differentiable_outputs: list[bool]
    buffer_mutations: list[tuple[str, str]]
    recompute_regions: dict[str, int]  # ONNX node name -> checkpoint region (checkpoint_regions.py)
    layers: dict[str, int]  # ONNX node name -> repeated layer (layers.py), for the memory levels
    # (graph output, condition): [1] bool outputs after the user's, all true when the call took the
    # branches a specialized capture traced (branch_checks.py); empty otherwise
    branch_checks: list[tuple[str, str]]


def translate(ep: ExportedProgram, user_input_order: list[str], batch_name: str | None, graph_name: str,
              autocast: torch.dtype | None = None) -> Translation:
    """ep's graph as ONNX; user_input_order lists the user tensor placeholders in graph-input order,
    batch_name names the first symbolic dim 0 of the user inputs in the ONNX types. `autocast`
    (torch.bfloat16) runs the matmul family in that dtype (autocast.py)."""
    return _Translator(ep, graph_name, autocast).run(user_input_order, batch_name)


class _Translator:
    def __init__(self, ep: ExportedProgram, graph_name: str, autocast: torch.dtype | None) -> None:
        self.ep = ep
        self.graph_name = graph_name
        self.b = GraphBuilder()
        self.symbols = SymbolTable(self.b)
        self.env: dict[torch.fx.Node, object] = {}
        self.autocast = Autocast(self.b, autocast) if autocast is not None else None
        self.unsupported: list[UnsupportedATenOp] = []
        self.recompute_regions: dict[str, int] = {}
        self.layers: dict[str, int] = {}
        self.layer_of = repeated_layers(ep.graph.nodes)
        self.specialized = is_specialized(ep)
        self.size_conditions = []  # torch.cond conditions on sizes, as the example takes them (_cond)
        self.checked_only = _CheckedOnly(asserts_kept=self.specialized)

    def run(self, user_input_order: list[str], batch_name: str | None) -> Translation:
        params, buffers = self._inputs(user_input_order, batch_name)
        for node in self.ep.graph.nodes:
            if node.op == "call_function":
                self._call_or_record(node)
            elif node.op not in ("placeholder", "output", "get_attr"):  # get_attr: HOP bodies, refused at the HOP
                raise CaptureError(f"FX node '{node.name}' ({node.op} {node.target}) is not an ATen call")
        if self.unsupported:
            raise unsupported_ops(self.unsupported)
        mutations, outputs, differentiable = self._outputs()
        conditions = (branch_conditions(self.ep) if self.specialized else []) + self.size_conditions
        branch_checks = [(self._check_output(self.symbols.lower_condition(expr)), str(expr)) for expr in conditions]
        self._declare_value_info()
        return Translation(self.b.to_model(self.graph_name), params, buffers, list(user_input_order), outputs,
                           differentiable, mutations, self.recompute_regions, self.layers, branch_checks)

    def _inputs(self, user_input_order: list[str], batch_name: str | None):
        """Declares graph inputs and initializers for the placeholders; returns (params, buffers)."""
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        nodes = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        params, buffers = [], []
        declared: dict[int, TensorValue] = {}  # by id of the module's tensor: tied weights are one input
        for name, node in nodes.items():
            spec = specs[name]
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                tensor = self.ep.state_dict.get(spec.target, self.ep.constants.get(spec.target))
                if id(tensor) in declared:
                    self.env[node] = declared[id(tensor)]
                    continue
                declared[id(tensor)] = self._declare(node)
                (params if spec.kind == InputKind.PARAMETER else buffers).append((name, spec.target))
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                value = self.ep.constants[spec.target]
                self.env[node] = TensorValue(self.b.add_initializer(value, name), value.dtype, tuple(value.shape))
            elif spec.kind == InputKind.USER_INPUT:
                if isinstance(spec.arg, ConstantArgument):
                    self.env[node] = spec.arg.value
                elif not isinstance(spec.arg, TensorArgument):
                    raise CaptureError(f"input '{name}' is a {type(spec.arg).__name__}; only tensors and "
                                       "constants are supported")
            else:
                raise CaptureError(f"input '{name}' of kind {spec.kind.name} is not supported")
        for name in user_input_order:
            self.symbols.add_source(name, nodes[name].meta["val"].shape, batch_name)
            self._declare(nodes[name])
        return params, buffers

    def _declare(self, node: torch.fx.Node) -> TensorValue:
        val = node.meta["val"]
        self.b.add_input(node.name, val.dtype, self.symbols.dims(val.shape))
        self.env[node] = TensorValue(node.name, val.dtype, tuple(val.shape))
        return self.env[node]

    def _call_or_record(self, node: torch.fx.Node) -> None:
        """Translates one node; an unsupported op is recorded and its value marked untranslated. The
        ONNX nodes of an FX node inside a checkpointed block join its recompute region, and those
        inside a repeated layer its layer."""
        start = self.b.num_nodes
        try:
            self._call(node)
            if (region := (node.meta.get("custom") or {}).get(RECOMPUTE_KEY)) is not None:
                self.recompute_regions.update(dict.fromkeys(self.b.node_names(start), int(region)))
            if (layer := self.layer_of.get(node)) is not None:
                self.layers.update(dict.fromkeys(self.b.node_names(start), layer))
        except UnsupportedATenOp as err:
            self.unsupported.append(err)
            self.env[node] = _UNTRANSLATED
        except _ReadsUntranslated:
            self.env[node] = _UNTRANSLATED

    def _call(self, node: torch.fx.Node) -> None:
        self.b.scope = node.name
        target = node.target
        if target is operator.getitem:
            self.env[node] = self._getitem(node)
        elif target is torch.ops.higher_order.wrap_with_set_grad_enabled:
            self.env[node] = self._set_grad_region(node)
        elif target is torch.ops.higher_order.cond:
            self.env[node] = self._cond(node)
        elif target in _ASSERTS:
            return
        elif target in _SIZE_OPS or (not isinstance(target, torch._ops.OpOverload)
                                     and isinstance(node.meta.get("val"), _SIZE_TYPES)) or self.checked_only(node):
            self.env[node] = node.meta["val"]  # symbolic.py computes it when an op needs it
        else:
            self.env[node] = self._aten(node)

    def _set_grad_region(self, node: torch.fx.Node) -> list:
        """A `torch.no_grad()` (or `enable_grad()`) block inside forward, which export's training IR
        keeps as wrap_with_set_grad_enabled(enable, body, *operands) over a subgraph module: the
        body's nodes are translated in place, and with grad disabled its float outputs pass
        through StopGradient, so no gradient flows back through the block, as in eager."""
        enable, body, *operands = node.args
        outputs, values = self._subgraph(node, body, operands)
        if enable:
            return list(values)
        self.b.scope = node.name
        # An output that is one of the block's inputs itself (`h.to(h.dtype)` inside the block returns
        # h): export makes the uses of h after the block read that output, and in eager they are h,
        # with its gradient. Only the values the block computed are cut from the gradient.
        return [v if _returns_an_input(out) else
                TensorValue(self.b.add_node("StopGradient", [v.name], domain="com.trainrt")[0], v.dtype, v.shape)
                if isinstance(v, TensorValue) and v.dtype.is_floating_point else v for out, v in zip(outputs, values)]

    def _subgraph(self, node: torch.fx.Node, body: torch.fx.Node, operands) -> tuple[list, list]:
        """Translates the nodes of a higher-order op's subgraph module (`body`, a get_attr of `node`'s
        graph) over the operands' values, into the current builder; returns its FX outputs and their
        values."""
        module = getattr(node.graph.owning_module, body.target)
        operands = list(operands)
        outputs = None
        for inner in module.graph.nodes:
            if inner.op == "placeholder":
                self.env[inner] = self._resolve(operands.pop(0))
            elif inner.op == "call_function":
                self._call_or_record(inner)
            elif inner.op == "output":
                outputs = inner.args[0]
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        return outputs, self._resolve(outputs)

    def _cond(self, node: torch.fx.Node) -> list:
        """torch.cond(pred, true_fn, false_fn, operands) on a tensor: an ONNX If whose branches are
        the two subgraphs translated over the operands, each a body that reads them (and any size it
        needs) from this graph by name. The engine differentiates the branch the condition takes
        (autodiff/control_flow_gradients.cc), giving zeros to what only the other reads, as eager's
        cond does. A condition known when captured keeps its branch only; one on sizes, below."""
        pred, true_fn, false_fn, operands = node.args
        condition = self._resolve(pred)
        if isinstance(condition, torch.SymBool) and condition.node.expr in (sympy.true, sympy.false):
            condition = bool(condition.node.expr)
        if isinstance(condition, bool):
            return list(self._subgraph(node, true_fn if condition else false_fn, operands)[1])
        if isinstance(condition, torch.SymBool):
            # A condition on sizes, a Python bool in eager (which calls that branch alone, so a
            # parameter only the other reads gets grad None): the branch this example takes, and
            # the condition checked every call like a data branch (branch_checks.py), so sizes that
            # take the other branch get a capture of their own.
            expr = condition.node.expr
            taken = bool(expr.xreplace(condition.node.shape_env.var_to_val))
            self.size_conditions.append(expr if taken else sympy.Not(expr))
            return list(self._subgraph(node, true_fn if taken else false_fn, operands)[1])
        if not isinstance(condition, TensorValue):
            raise UnsupportedATenOp("higher_order.cond", node.name, source_line(node),
                                    f"on a condition of type {type(condition).__name__} has no TrainRT translation")
        outer, branches, results = self.b, {}, []
        for attr, fn in (("then_branch", true_fn), ("else_branch", false_fn)):
            self.b = outer.body()
            try:
                _, results = self._subgraph(node, fn, operands)
                if any(not isinstance(v, TensorValue) for v in results):
                    raise UnsupportedATenOp("higher_order.cond", node.name, source_line(node),
                                            "with a branch that returns something other than tensors")
                for v in results:
                    self.b.add_output(v.name, v.dtype, self.symbols.dims(v.shape))
                branches[attr] = self.b.to_graph(f"{node.name}_{attr}")
            finally:
                self.b = outer
        self.b.scope = node.name
        names = self.b.add_node("If", [condition.name], num_outputs=len(results), **branches)
        return [TensorValue(name, v.dtype, tuple(v.shape)) for name, v in zip(names, node.meta["val"])]

    def _getitem(self, node: torch.fx.Node):
        seq, index = node.args
        value = self._resolve(seq)[index]
        if value is None and node.users:
            raise CaptureError(f"node '{node.name}' reads output {index} of '{seq.name}', which was not translated")
        return value

    def _aten(self, node: torch.fx.Node):
        name = op_name(node)
        if touches_complex(node):  # complex tensors are carried as (real, imaginary) pairs: ops_complex.py
            fn = COMPLEX_OPS.get(name)
            if fn is None:
                raise UnsupportedATenOp(name, node.name, source_line(node), "on complex tensors has no TrainRT translation")
            args = bind_args(node, self._resolve(node.args), self._resolve(node.kwargs))
            return _wrap(fn(OpContext(node, self.b, self.symbols, args)), node.meta["val"])
        fn = ATEN_OPS.get(name)
        if fn is None:
            raise UnsupportedATenOp(name, node.name, source_line(node))
        args = bind_args(node, self._resolve(node.args), self._resolve(node.kwargs))
        val = node.meta["val"]
        if not self.autocast:
            return _wrap(fn(OpContext(node, self.b, self.symbols, args)), val)
        dtypes = self.autocast.output_dtypes(node, name, lambda a: self._resolve(a).dtype)
        if dtypes is None or self.autocast.widens(name, args):  # computed in f32 between casts
            out = fn(OpContext(node, self.b, self.symbols, self.autocast.widened_inputs(node, name, args)))
            return _wrap(out if dtypes is None else self.autocast.narrow(out, dtypes_of(val), dtypes), val, dtypes)
        args = self.autocast.cast_inputs(name, args)
        compute = dtypes if isinstance(dtypes, torch.dtype) else None
        return _wrap(fn(OpContext(node, self.b, self.symbols, args, compute)), val, dtypes)

    def _resolve(self, arg):
        """Replaces FX nodes inside an argument (lists, tuples, dicts) by their translated values."""
        if isinstance(arg, torch.fx.Node):
            if arg not in self.env:
                raise CaptureError(f"node '{arg.name}' is used but produced no value")
            if self.env[arg] is _UNTRANSLATED:
                raise _ReadsUntranslated(arg.name)
            return self.env[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._resolve(a) for a in arg)
        if isinstance(arg, dict):
            return {k: self._resolve(v) for k, v in arg.items()}
        return arg

    def _outputs(self):
        """Graph outputs: buffer mutations first, then user outputs; returns the bookkeeping lists."""
        (output_node,) = [n for n in self.ep.graph.nodes if n.op == "output"]
        values = output_node.args[0]
        mutations, user = [], []
        for spec, arg in zip(self.ep.graph_signature.output_specs, values):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                mutations.append((arg, spec.target))
            elif spec.kind == OutputKind.USER_OUTPUT:
                user.append(arg)
            else:
                raise CaptureError(f"output '{getattr(spec.arg, 'name', spec.arg)}' of kind {spec.kind.name} "
                                   "is not supported (the module mutates a parameter or an input in place?)")
        done: set[str] = set()
        buffer_mutations = [(self._output(a, done, f"buffer '{fqn}'"), fqn) for a, fqn in mutations]
        outputs = [self._output(a, done, f"user output #{i}") for i, a in enumerate(user)]
        differentiable = [self._resolve(a).dtype.is_floating_point for a in user]
        return buffer_mutations, outputs, differentiable

    def _output(self, arg, done: set[str], what: str) -> str:
        """Declares one graph output; Identity when the value is an input, an initializer or
        already an output (ONNX graph outputs are distinct node outputs)."""
        value = self._resolve(arg)
        if not isinstance(value, TensorValue):
            raise CaptureError(f"{what} is a {type(value).__name__} ({value!r}); outputs must be tensors")
        self.b.scope = "output"
        name = value.name
        if name in done or not self.b.is_node_output(name):
            name = self.b.add_node("Identity", [name], hint=f"{name}/output")[0]
        done.add(name)
        self.b.add_output(name, value.dtype, self.symbols.dims(value.shape))
        return name


    def _declare_value_info(self) -> None:
        """A value_info per translated tensor, with export's symbolic dims (`batch`, `s53`,
        `batch*s53`): the engine's shape inference cannot name the dims of a Reshape to a computed
        shape, and a pass that follows the tokens through the model needs them. A complex value
        has none: its real layout has a pair axis more (ops_complex.py)."""
        declared: dict[str, TensorValue] = {}
        pending = list(self.env.values())
        while pending:
            value = pending.pop()
            if isinstance(value, (list, tuple)):
                pending.extend(value)
            elif isinstance(value, TensorValue) and self.b.is_node_output(value.name) and not value.dtype.is_complex:
                declared.setdefault(value.name, value)
        for value in declared.values():
            self.b.add_value_info(value.name, value.dtype, self.symbols.declared_dims(value.shape))

    def _check_output(self, value: str) -> str:
        """A branch check as a graph output of its own ([1] bool)."""
        self.b.scope = "output"
        name = self.b.add_node("Identity", [value], hint="branch_check")[0]
        self.b.add_output(name, torch.bool, [1])
        return name


def _wrap(result, val, dtypes=None):
    """Pairs a translation's output name(s) with the node's FakeTensor value(s): their shapes, and
    their dtypes unless `dtypes` (shaped like val) gives others. A number (`.item()`) is its own
    value: the translation returns the SymInt, which symbolic.py lowers where an op reads it."""
    if isinstance(val, _SIZE_TYPES):
        return result
    if isinstance(val, torch.Tensor):
        if not isinstance(result, str):
            raise CaptureError(f"translation returned {result!r} for a tensor output")
        return TensorValue(result, dtypes or val.dtype, tuple(val.shape))
    dtypes = dtypes or [None] * len(val)
    return [None if r is None else _wrap(r, v, d) for r, v, d in zip(result, val, dtypes)]
