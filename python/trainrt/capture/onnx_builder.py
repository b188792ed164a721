"""GraphBuilder: accumulates the nodes, initializers, inputs and outputs of one ONNX graph.

The translator and the per-op translations emit through it, so names stay unique and small
constants are shared:

    b = GraphBuilder()
    x = b.add_input("x", torch.float32, ["batch", 8])
    (y,) = b.add_node("Relu", [x], hint="relu")
    b.add_output(y, torch.float32, ["batch", 8])
    model = b.to_model()
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from trainrt.capture.errors import CaptureError
from trainrt.options import ONNX_OPSET  # one definition: the options check it, the builder writes it

# Opset 20 needs IR version 9 (onnx.helper.VERSION_TABLE); the engine reads it.
IR_VERSION = 9

# torch dtypes TrainRT runs (docs/architecture.md: f32, f16, bf16, f64, i64, i32, i8, u8, bool).
_ONNX_TYPES = {
    torch.float32: TensorProto.FLOAT,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.float64: TensorProto.DOUBLE,
    torch.int64: TensorProto.INT64,
    torch.int32: TensorProto.INT32,
    torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8,
    torch.bool: TensorProto.BOOL,
}


def onnx_type(dtype: torch.dtype) -> int:
    """The ONNX element type of a torch dtype; CaptureError for dtypes the engine lacks."""
    if dtype not in _ONNX_TYPES:
        raise CaptureError(f"dtype {dtype} is not a TrainRT dtype (f32 f16 bf16 f64 i64 i32 i8 u8 bool)")
    return _ONNX_TYPES[dtype]


def tensor_proto(value: torch.Tensor, name: str) -> TensorProto:
    """A TensorProto of a torch tensor (bf16 through its raw bits: numpy has no bfloat16)."""
    value = value.detach().cpu().contiguous()
    if value.dtype == torch.bfloat16:
        proto = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(value.shape))
        proto.raw_data = value.view(torch.int16).numpy().tobytes()
        return proto
    onnx_type(value.dtype)
    return numpy_helper.from_array(value.numpy(), name)


def fill_value(value, dtype: torch.dtype) -> TensorProto:
    """ConstantOfShape's `value` attribute: one element of dtype."""
    return tensor_proto(torch.tensor([value], dtype=dtype), "value")


class GraphBuilder:
    """One ONNX graph under construction; hands out unique value and node names."""

    def __init__(self) -> None:
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[TensorProto] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._value_info: list[onnx.ValueInfoProto] = []
        self._used: set[str] = set()
        self._next_suffix: dict[str, int] = {}  # per fresh() hint: every hint_k below it is taken
        self._produced: set[str] = set()  # outputs of nodes (graph outputs must be one of these)
        self._consts: dict[tuple, str] = {}
        self._domains: set[str] = set()  # non-ONNX domains used by nodes
        self.scope = "graph"  # hint prefix: the FX node being translated

    def fresh(self, hint: str) -> str:
        """A value or node name not used before, `hint` itself when still free."""
        name, k = hint, self._next_suffix.get(hint, 1)
        while name in self._used:
            name = f"{hint}_{k}"
            k += 1
        self._next_suffix[hint] = k  # the suffixes below are taken: a hint used n times costs O(n), not O(n^2)
        self._used.add(name)
        return name

    def reserve(self, name: str) -> str:
        """Claims an exact name (graph inputs keep their FX names); CaptureError when taken."""
        if name in self._used:
            raise CaptureError(f"value name '{name}' is used twice")
        self._used.add(name)
        return name

    def add_input(self, name: str, dtype: torch.dtype, dims: Sequence[int | str | None]) -> str:
        self._inputs.append(helper.make_tensor_value_info(self.reserve(name), onnx_type(dtype), list(dims)))
        return name

    def add_output(self, name: str, dtype: torch.dtype, dims: Sequence[int | str | None]) -> None:
        self._outputs.append(helper.make_tensor_value_info(name, onnx_type(dtype), list(dims)))

    def add_value_info(self, name: str, dtype: torch.dtype, dims: Sequence[int | str]) -> None:
        """Declares a node output's type: export's symbolic dims, which inference alone loses
        after a Reshape to a computed shape (passes read them from Value::declared)."""
        self._value_info.append(helper.make_tensor_value_info(name, onnx_type(dtype), list(dims)))

    def add_initializer(self, value: torch.Tensor, hint: str) -> str:
        name = self.fresh(hint)
        self._initializers.append(tensor_proto(value, name))
        return name

    def const(self, values, dtype: torch.dtype) -> str:
        """A shared initializer holding `values` as `dtype`: a number is 0-d, a flat list 1-D.
        Constants of equal values, dtype and shape are one initializer."""
        t = torch.tensor(values, dtype=dtype)
        key = (dtype, tuple(t.shape), tuple(t.flatten().tolist()))
        if key not in self._consts:
            self._consts[key] = self.add_initializer(t, f"{self.scope}/const")
        return self._consts[key]

    def add_node(self, op: str, inputs: Sequence[str | None], num_outputs: int = 1, *,
                 hint: str | None = None, domain: str = "", **attrs) -> list[str]:
        """Appends a node named after its first output; returns its output names. None inputs are
        omitted optional inputs; None attributes are left out; `domain` other than ONNX's (TrainRT's
        "com.trainrt") is imported at opset 1."""
        base = f"{self.scope}/{op}" if hint is None else hint
        outputs = [self.fresh(base if num_outputs == 1 else f"{base}:{i}") for i in range(num_outputs)]
        names = ["" if i is None else i for i in inputs]
        while names and names[-1] == "":
            names.pop()
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self._nodes.append(helper.make_node(op, names, outputs, name=outputs[0], domain=domain or None, **attrs))
        if domain:
            self._domains.add(domain)
        self._produced.update(outputs)
        return outputs

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def node_names(self, start: int) -> list[str]:
        """The names of the nodes added since the builder had `start` nodes."""
        return [n.name for n in self._nodes[start:]]

    def is_node_output(self, name: str) -> bool:
        return name in self._produced

    def body(self) -> GraphBuilder:
        """A builder for a control-flow body inside this graph (an If branch): names stay unique
        across both (a body reads this graph's values by name), and the ops of other domains it uses
        are imported by the model; its constants and nodes are its own."""
        inner = GraphBuilder()
        inner._used = self._used
        inner._next_suffix = self._next_suffix
        inner._domains = self._domains
        inner.scope = self.scope
        return inner

    def to_graph(self, graph_name: str) -> onnx.GraphProto:
        """The graph as a body (no inputs: it reads the enclosing graph's values by name)."""
        return helper.make_graph(self._nodes, graph_name, self._inputs, self._outputs, self._initializers,
                                 value_info=self._value_info)

    def to_model(self, graph_name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self._nodes, graph_name, self._inputs, self._outputs, self._initializers,
                                  value_info=self._value_info)
        opsets = [helper.make_opsetid("", ONNX_OPSET)] + [helper.make_opsetid(d, 1) for d in sorted(self._domains)]
        model = helper.make_model(graph, opset_imports=opsets,
                                  producer_name="trainrt.capture")
        model.ir_version = IR_VERSION
        return model
