"""SplitToSequence + SequenceAt, as torch.onnx.export(dynamo=True, optimize=False) writes split,
chunk and unbind, are lowered to tensor ops at import (ir/onnx_sequences.h): each case against
numpy and onnxruntime, sizes given in the file or computed by the graph (a split by counts read
from the data, as MoE experts split their tokens); a sequence read otherwise stays and is refused,
naming the op."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import trainrt


def _model(split=None, keepdims=1, axis=1, positions=(0, 1), split_as_initializer=True):
    nodes, inits = [], []
    inputs = ["x"]
    if split is not None:
        inputs.append("split")
        if split_as_initializer:
            inits.append(numpy_helper.from_array(np.array(split, dtype=np.int64), "split"))  # a scalar: equal parts
        else:
            nodes.append(helper.make_node("Constant", [], ["split"], value=numpy_helper.from_array(np.array(split, dtype=np.int64))))
    nodes.append(helper.make_node("SplitToSequence", inputs, ["seq"], axis=axis, keepdims=keepdims))
    outputs = []
    for k, p in enumerate(positions):
        nodes.append(helper.make_node("Constant", [], [f"p{k}"], value_int=p))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"p{k}"], [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 3])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _expected(x, split, keepdims, axis, positions):
    if split is None:
        parts = [np.take(x, i, axis=axis) if not keepdims else np.take(x, [i], axis=axis) for i in range(x.shape[axis])]
    else:
        sizes = list(split) if isinstance(split, list) else [split] * -(-x.shape[axis] // split)
        edges = np.cumsum([0] + list(sizes))
        parts = [np.take(x, range(edges[i], min(edges[i + 1], x.shape[axis])), axis=axis) for i in range(len(sizes))]
    return [parts[p] for p in positions]


@pytest.mark.parametrize("split, keepdims, positions, as_init", [
    (None, 0, (0, 4, -1), True),     # unbind
    (None, 1, (2,), True),           # size-1 parts that keep the axis
    (2, 1, (0, 2), True),            # a scalar split: chunks of 2, the last shorter
    ([1, 3, 1], 0, (1, -1), False),  # given sizes (keepdims ignored), a Constant node
])
def test_split_to_sequence_parts_match_numpy_and_onnxruntime(split, keepdims, positions, as_init):
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    model = _model(split, keepdims, 1, positions, as_init)
    got = trainrt.Session(model).run([x])
    for g, want in zip(got, _expected(x, split, keepdims, 1, positions)):
        np.testing.assert_array_equal(np.asarray(g), want)
    ort = pytest.importorskip("onnxruntime")
    for g, ref in zip(got, ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})):
        np.testing.assert_array_equal(np.asarray(g), ref)


def test_a_sequence_read_otherwise_is_refused_naming_the_op():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    graph = helper.make_graph(nodes, "len", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    with pytest.raises(trainrt.UnsupportedOp, match="SplitToSequence"):
        trainrt.Session(model).run([np.zeros(4, np.float32)])


def _computed_split_model(positions):
    """x (N, 3) split along 0 by sizes Concat(a, b, c) of three (1,) inputs: the exporter's form of
    x.split(counts.tolist()), each size known only when the model runs."""
    nodes = [helper.make_node("Concat", ["a", "b", "c"], ["sizes"], axis=0),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], axis=0)]
    outputs = []
    for k, p in enumerate(positions):
        nodes.append(helper.make_node("Constant", [], [f"p{k}"], value_int=p))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"p{k}"], [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])]
    inputs += [helper.make_tensor_value_info(name, TensorProto.INT64, [1]) for name in "abc"]
    graph = helper.make_graph(nodes, "computed", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("sizes", [(2, 3, 1), (0, 6, 0), (4, 0, 2)])
def test_split_sizes_the_graph_computes_are_read_when_the_model_runs(sizes):
    positions = (0, 1, 2, -1, -2)
    model = _computed_split_model(positions)
    session = trainrt.Session(model)
    x = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime").InferenceSession(model, providers=["CPUExecutionProvider"])
    for run in (sizes, sizes[::-1]):  # one session, other sizes at the next run
        feeds = [x] + [np.array([s], np.int64) for s in run]
        got = session.run(feeds)
        edges = np.cumsum((0, *run))
        parts = [x[edges[i]:edges[i + 1]] for i in range(3)]
        for g, p in zip(got, positions):
            np.testing.assert_array_equal(np.asarray(g), parts[p])
        for g, ref in zip(got, ort.run(None, dict(zip(["x", "a", "b", "c"], feeds)))):
            np.testing.assert_array_equal(np.asarray(g), ref)
