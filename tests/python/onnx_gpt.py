"""A GPT-style transformer as an ONNX model, built with onnx.helper, for the CLI and round-trip tests.

Token embedding via Gather, LayerNormalization, causal self-attention with MatMul/Softmax and a mask,
GELU MLP, residuals, final LayerNormalization and an LM head tied to the embedding.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def transformer_model(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> bytes:
    """ONNX model: tokens (batch, seq) int64 -> logits (batch, seq, vocab)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name, shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    head_dim = hidden // heads
    x = node("Gather", [weight("wte", (vocab, hidden)), "tokens"], "embed")
    x = node("Add", [x, weight("wpe", (seq, hidden))], "embed_pos")
    mask = const("causal_mask", np.triu(np.full((seq, seq), -1e9, np.float32), 1), np.float32)
    split_heads = const("split_heads", [0, seq, heads, head_dim])
    merge_heads = const("merge_heads", [0, seq, hidden])
    scale = const("scale", 1.0 / np.sqrt(head_dim), np.float32)
    for i in range(layers):
        p = f"l{i}_"
        h = node("LayerNormalization", [x, weight(p + "ln1_g", (hidden,), 1.0), weight(p + "ln1_b", (hidden,))], p + "ln1", axis=-1)
        qkv = []
        for part in "qkv":
            t = node("MatMul", [h, weight(p + "w" + part, (hidden, hidden))], p + part)
            t = node("Reshape", [t, split_heads], p + part + "_heads")
            perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
            qkv.append(node("Transpose", [t], p + part + "_t", perm=perm))
        scores = node("MatMul", [qkv[0], qkv[1]], p + "scores")
        scores = node("Mul", [scores, scale], p + "scaled")
        scores = node("Add", [scores, mask], p + "masked")
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        att = node("MatMul", [probs, qkv[2]], p + "att")
        att = node("Transpose", [att], p + "att_t", perm=[0, 2, 1, 3])
        att = node("Reshape", [att, merge_heads], p + "att_merged")
        att = node("MatMul", [att, weight(p + "wo", (hidden, hidden))], p + "proj")
        x = node("Add", [x, att], p + "res1")
        h = node("LayerNormalization", [x, weight(p + "ln2_g", (hidden,), 1.0), weight(p + "ln2_b", (hidden,))], p + "ln2", axis=-1)
        h = node("MatMul", [h, weight(p + "w_fc", (hidden, 4 * hidden))], p + "fc")
        h = node("Add", [h, weight(p + "b_fc", (4 * hidden,))], p + "fc_b")
        h = node("Gelu", [h], p + "gelu", approximate="tanh")
        h = node("MatMul", [h, weight(p + "w_proj", (4 * hidden, hidden))], p + "mlp")
        x = node("Add", [x, h], p + "res2")
    x = node("LayerNormalization", [x, weight("lnf_g", (hidden,), 1.0), weight("lnf_b", (hidden,))], "lnf", axis=-1)
    nodes.append(helper.make_node("MatMul", [x, "wte_t"], ["logits"], name="lm_head"))
    inits.append(numpy_helper.from_array(numpy_helper.to_array(inits[0]).T.copy(), "wte_t"))
    graph = helper.make_graph(
        nodes, "gpt_demo",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", seq, vocab])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString()
