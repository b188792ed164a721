"""TrainRT's own ops (com.trainrt) in an inference graph, rewritten as standard ONNX (opset 20) at export.

    model = lower_to_standard_onnx(model)        # onnx.ModelProto; onnxruntime runs it
    onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)

The capture writes a few ops of TrainRT's domain (ops/ in C++ says what each computes); each one
becomes the standard subgraph below, one node at a time, in place, its outputs keeping their names:

    StopGradient(x)                      -> Identity(x)
    Embedding(weight, ids; padding_idx)  -> Gather(weight, ids, axis=0)   (padding_idx only acts on the
                                                                           gradient: nothing to keep)
    FusedMatMul(A, B, [bias]; transA, transB, alpha)
                                         -> MatMul(op(A), op(B)) [* alpha] [+ bias]; op swaps the last
                                            two axes (Transpose when the rank is known, else Einsum,
                                            which onnxruntime runs and trainrt.Session does not)
    ScaledDotProductAttention(Q, K, V, [mask]; is_causal, scale, dropout_p=0) -> (O, [logsumexp])
        Q (B, H, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev); torch's scaled_dot_product_attention
        (its documented math): scores = Q @ K^T * scale (scale 1/sqrt(E) unless given) (B, H, L, S);
        a bool mask keeps where true (-inf elsewhere), a float mask is added; is_causal keeps s <= l
        (top-left aligned); O = Softmax(scores, -1) @ V (B, H, L, Ev); logsumexp = ReduceLogSumExp of
        the masked scores over S, written only when something reads it. Grouped K/V heads (Hkv < H)
        are repeated to H first: query head h reads K/V head h // (H / Hkv).

An inference graph has no dropout: an attention with dropout_p > 0 is refused, and so is any other
TrainRT op (PythonOp runs a Python autograd.Function: it has no ONNX form), naming the node.
By the house rules a graph rewrite is a C++ pass; this one lives here because it only shapes the file
written for other runtimes: the engine itself never reads it.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TRAINRT_DOMAIN = "com.trainrt"


class _Rewriter:
    """Fresh names, constants and the types known so far (ONNX shape inference) for one graph."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self._used = {o for n in self.graph.node for o in n.output} | {i.name for i in self.graph.input} | \
                     {i.name for i in self.graph.initializer}
        self._types: dict[str, onnx.TypeProto] = {}
        self._ranks_of_initializers = {i.name: len(i.dims) for i in self.graph.initializer}
        self.read = {i for n in self.graph.node for i in n.input} | {o.name for o in self.graph.output}
        self.infer()

    def infer(self) -> None:
        """The element types and shapes ONNX shape inference gives (TrainRT's ops and what depends on
        them stay unknown until they are rewritten). Large initializers (weights) are given to it as
        typed graph inputs: it needs their shapes, not their bytes."""
        light = onnx.ModelProto()
        light.ir_version = self.model.ir_version
        light.opset_import.extend(self.model.opset_import)
        g = light.graph
        g.node.extend(self.graph.node)
        g.input.extend(self.graph.input)
        g.output.extend(self.graph.output)
        inputs = {i.name for i in self.graph.input}
        for init in self.graph.initializer:
            if np.prod(init.dims, dtype=np.int64) <= 64:  # small constants: shapes of Reshape, axes, ...
                g.initializer.append(init)
            elif init.name not in inputs:
                g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        g = onnx.shape_inference.infer_shapes(light).graph
        self._types = {v.name: v.type for v in list(g.value_info) + list(g.input) + list(g.output)}

    def fresh(self, hint: str) -> str:
        name, i = hint, 0
        while name in self._used:
            i += 1
            name = f"{hint}_{i}"
        self._used.add(name)
        return name

    def const(self, values, dtype=np.int64, hint: str = "lowered/const") -> str:
        name = self.fresh(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def rank(self, name: str) -> int | None:
        if name in self._ranks_of_initializers:
            return self._ranks_of_initializers[name]
        t = self._types.get(name)
        if t is None or not t.tensor_type.HasField("shape"):
            return None
        return len(t.tensor_type.shape.dim)

    def static_dim(self, name: str, axis: int) -> int | None:
        """Dim `axis` of `name` when shape inference knows it as a number."""
        t = self._types.get(name)
        dims = t.tensor_type.shape.dim if t is not None and t.tensor_type.HasField("shape") else []
        return dims[axis].dim_value if axis < len(dims) and dims[axis].HasField("dim_value") else None

    def elem_type(self, name: str) -> int | None:
        if name in self._types:
            return self._types[name].tensor_type.elem_type or None
        init = next((i for i in self.graph.initializer if i.name == name), None)
        return init.data_type if init is not None else None

    def dim(self, nodes: list, x: str, axis: int, hint: str) -> str:
        """A 1-D int64 tensor holding dim `axis` of x (nodes appended to `nodes`)."""
        shape = self.fresh(f"{hint}/shape")
        out = self.fresh(f"{hint}/dim{axis}")
        nodes += [helper.make_node("Shape", [x], [shape], name=shape),
                  helper.make_node("Gather", [shape, self.const([axis])], [out], name=out, axis=0)]
        return out


def _swap_last_two(rw: _Rewriter, nodes: list, x: str, hint: str, rank: int | None = None) -> str:
    out = rw.fresh(f"{hint}/transposed")
    rank = rw.rank(x) if rank is None else rank
    if rank is None:  # any rank: Einsum's ellipsis (onnxruntime runs it; trainrt.Session does not)
        nodes.append(helper.make_node("Einsum", [x], [out], name=out, equation="...ij->...ji"))
    else:
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        nodes.append(helper.make_node("Transpose", [x], [out], name=out, perm=perm))
    return out


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _stop_gradient(rw: _Rewriter, node: onnx.NodeProto) -> list:
    return [helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)]


def _embedding(rw: _Rewriter, node: onnx.NodeProto) -> list:
    return [helper.make_node("Gather", list(node.input[:2]), [node.output[0]], name=node.name, axis=0)]


def _fused_matmul(rw: _Rewriter, node: onnx.NodeProto) -> list:
    attrs, hint, nodes = _attrs(node), node.name or node.output[0], []
    a, b = node.input[0], node.input[1]
    if attrs.get("transA", 0):
        a = _swap_last_two(rw, nodes, a, f"{hint}/A")
    if attrs.get("transB", 0):
        b = _swap_last_two(rw, nodes, b, f"{hint}/B")
    steps = [("Mul", rw.const(attrs["alpha"], np.float32)) if attrs.get("alpha", 1.0) != 1.0 else None,
             ("Add", node.input[2]) if len(node.input) > 2 and node.input[2] else None]
    steps = [s for s in steps if s]
    y = node.output[0] if not steps else rw.fresh(f"{hint}/MatMul")
    nodes.append(helper.make_node("MatMul", [a, b], [y], name=y))
    for i, (op, operand) in enumerate(steps):
        out = node.output[0] if i == len(steps) - 1 else rw.fresh(f"{hint}/{op}")
        nodes.append(helper.make_node(op, [y, operand], [out], name=out))
        y = out
    return nodes


def _repeat_heads(rw: _Rewriter, nodes: list, x: str, heads: str, hint: str) -> str:
    """x (B, Hkv, S, D) -> (B, H, S, D), each K/V head repeated H / Hkv times in place (repeat_interleave)."""
    shape = rw.fresh(f"{hint}/shape")
    nodes.append(helper.make_node("Shape", [x], [shape], name=shape))
    parts = {}
    for axis in range(4):
        parts[axis] = rw.fresh(f"{hint}/d{axis}")
        nodes.append(helper.make_node("Gather", [shape, rw.const([axis])], [parts[axis]], name=parts[axis], axis=0))
    group = rw.fresh(f"{hint}/group")
    expanded_shape, merged_shape = rw.fresh(f"{hint}/expanded_shape"), rw.fresh(f"{hint}/merged_shape")
    unsqueezed, expanded, out = rw.fresh(f"{hint}/unsqueezed"), rw.fresh(f"{hint}/expanded"), rw.fresh(f"{hint}/repeated")
    nodes += [helper.make_node("Div", [heads, parts[1]], [group], name=group),
              helper.make_node("Concat", [parts[0], parts[1], group, parts[2], parts[3]], [expanded_shape],
                               name=expanded_shape, axis=0),
              helper.make_node("Concat", [parts[0], heads, parts[2], parts[3]], [merged_shape], name=merged_shape, axis=0),
              helper.make_node("Unsqueeze", [x, rw.const([2])], [unsqueezed], name=unsqueezed),
              helper.make_node("Expand", [unsqueezed, expanded_shape], [expanded], name=expanded),
              helper.make_node("Reshape", [expanded, merged_shape], [out], name=out)]
    return out


def _heads_may_differ(rw: _Rewriter, q: str, k: str) -> bool:
    heads, kv_heads = rw.static_dim(q, 1), rw.static_dim(k, 1)
    return heads is None or kv_heads is None or heads != kv_heads


def _attention(rw: _Rewriter, node: onnx.NodeProto) -> list:
    attrs, hint, nodes = _attrs(node), node.name or node.output[0], []
    if attrs.get("dropout_p", 0.0) > 0 or len(node.output) > 2:
        raise ValueError(f"export: node {node.name!r} ({TRAINRT_DOMAIN}::ScaledDotProductAttention) has dropout "
                         f"(dropout_p={attrs.get('dropout_p')}); an inference graph has none: export in eval mode")
    q, k, v = node.input[:3]
    mask = node.input[3] if len(node.input) > 3 and node.input[3] else None
    if _heads_may_differ(rw, q, k):
        heads = rw.dim(nodes, q, 1, f"{hint}/H")
        k = _repeat_heads(rw, nodes, k, heads, f"{hint}/K")
        v = _repeat_heads(rw, nodes, v, heads, f"{hint}/V")
    if "scale" in attrs:
        scale = rw.const(attrs["scale"], np.float32)
    else:  # 1 / sqrt(E), E the last dim of Q
        e = rw.dim(nodes, q, 3, f"{hint}/E")
        e_float, scale = rw.fresh(f"{hint}/E_float"), rw.fresh(f"{hint}/scale")
        sqrt = rw.fresh(f"{hint}/sqrt_E")
        nodes += [helper.make_node("Cast", [e], [e_float], name=e_float, to=TensorProto.FLOAT),
                  helper.make_node("Sqrt", [e_float], [sqrt], name=sqrt),
                  helper.make_node("Reciprocal", [sqrt], [scale], name=scale)]
    if rw.elem_type(q) not in (None, TensorProto.FLOAT):
        raise ValueError(f"export: node {node.name!r} ({TRAINRT_DOMAIN}::ScaledDotProductAttention) has "
                         f"{TensorProto.DataType.Name(rw.elem_type(q))} inputs; the lowering writes float32")
    kt = _swap_last_two(rw, nodes, k, f"{hint}/K", rank=4)
    product, scores = rw.fresh(f"{hint}/QK"), rw.fresh(f"{hint}/scores")
    nodes += [helper.make_node("MatMul", [q, kt], [product], name=product),
              helper.make_node("Mul", [product, scale], [scores], name=scores)]
    minus_inf = rw.const(-math.inf, np.float32)
    if mask is not None:
        masked = rw.fresh(f"{hint}/masked")
        if rw.elem_type(mask) == TensorProto.BOOL:
            nodes.append(helper.make_node("Where", [mask, scores, minus_inf], [masked], name=masked))
        elif rw.elem_type(mask) is None:
            raise ValueError(f"export: node {node.name!r}: the dtype of its mask {mask!r} is not known")
        else:
            nodes.append(helper.make_node("Add", [scores, mask], [masked], name=masked))
        scores = masked
    if attrs.get("is_causal", 0):
        scores = _causal(rw, nodes, q, k, scores, minus_inf, hint)
    probs = rw.fresh(f"{hint}/probs")
    nodes += [helper.make_node("Softmax", [scores], [probs], name=probs, axis=-1),
              helper.make_node("MatMul", [probs, v], [node.output[0]], name=node.name)]
    if len(node.output) > 1 and node.output[1] and node.output[1] in rw.read:
        nodes.append(helper.make_node("ReduceLogSumExp", [scores, rw.const([-1])], [node.output[1]],
                                      name=node.output[1], keepdims=0))
    return nodes


def _causal(rw: _Rewriter, nodes: list, q: str, k: str, scores: str, minus_inf: str, hint: str) -> str:
    """scores where key s <= query l (torch's is_causal: tril, top-left aligned), -inf elsewhere."""
    length, keys = rw.dim(nodes, q, 2, f"{hint}/L"), rw.dim(nodes, k, 2, f"{hint}/S")
    zero, one = rw.const(0), rw.const(1)
    scalars = {}
    for name, d in (("L", length), ("S", keys)):
        scalars[name] = rw.fresh(f"{hint}/{name}_scalar")
        nodes.append(helper.make_node("Squeeze", [d, rw.const([0])], [scalars[name]], name=scalars[name]))
    rows, cols = rw.fresh(f"{hint}/rows"), rw.fresh(f"{hint}/cols")
    rows_col, cols_row = rw.fresh(f"{hint}/rows_col"), rw.fresh(f"{hint}/cols_row")
    keep, out = rw.fresh(f"{hint}/causal_keep"), rw.fresh(f"{hint}/causal")
    nodes += [helper.make_node("Range", [zero, scalars["L"], one], [rows], name=rows),
              helper.make_node("Range", [zero, scalars["S"], one], [cols], name=cols),
              helper.make_node("Unsqueeze", [rows, rw.const([1])], [rows_col], name=rows_col),  # (L, 1)
              helper.make_node("Unsqueeze", [cols, rw.const([0])], [cols_row], name=cols_row),  # (1, S)
              helper.make_node("LessOrEqual", [cols_row, rows_col], [keep], name=keep),         # (L, S)
              helper.make_node("Where", [keep, scores, minus_inf], [out], name=out)]
    return out


LOWERINGS: dict[str, Callable[[_Rewriter, onnx.NodeProto], list]] = {
    "StopGradient": _stop_gradient,
    "Embedding": _embedding,
    "FusedMatMul": _fused_matmul,
    "ScaledDotProductAttention": _attention,
}


def lower_to_standard_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every com.trainrt node rewritten as standard ONNX ops (module docstring);
    ValueError naming the node for one that has no standard form."""
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    rw = _Rewriter(lowered)
    nodes = list(lowered.graph.node)
    out = []
    for i, node in enumerate(nodes):
        if node.domain != TRAINRT_DOMAIN:
            out.append(node)
            continue
        lower = LOWERINGS.get(node.op_type)
        if lower is None:
            raise ValueError(f"export: node {node.name!r} is {TRAINRT_DOMAIN}::{node.op_type}, which has no standard "
                             f"ONNX form (ONNX runtimes other than TrainRT's cannot run it)")
        if node.op_type == "ScaledDotProductAttention":  # the mask's dtype: infer what is rewritten so far
            del lowered.graph.node[:]
            lowered.graph.node.extend(out + nodes[i:])
            rw.infer()
        out += lower(rw, node)
    del lowered.graph.node[:]
    lowered.graph.node.extend(out)
    kept = [o for o in lowered.opset_import if o.domain != TRAINRT_DOMAIN]
    del lowered.opset_import[:]
    lowered.opset_import.extend(kept)
    onnx.checker.check_model(lowered)
    return lowered
