"""The Python Session runs ONNX models: results, plan caching per shape, errors, profiling."""

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import trainrt


def test_mlp_matches_numpy_for_several_batch_sizes(mlp_model):
    model, reference = mlp_model
    session = trainrt.Session(model)
    for batch in (1, 5, 64, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
        (y,) = session.run([x])
        np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-5)
    stats = session.memory_stats()
    assert stats["planned_arena_bytes"] >= stats["live_lower_bound"] > 0


def test_outputs_are_owned_by_the_caller(mlp_model):
    model, reference = mlp_model
    session = trainrt.Session(model)
    x1 = np.ones((2, 8), np.float32)
    (y1,) = session.run([x1])
    kept = y1.copy()
    session.run([np.zeros((2, 8), np.float32)])
    np.testing.assert_array_equal(y1, kept)  # a later run must not overwrite earlier outputs


def test_wrong_input_count_dtype_and_shape_are_typed_errors(mlp_model):
    model, _ = mlp_model
    session = trainrt.Session(model)
    with pytest.raises(trainrt.ShapeError, match="1 inputs"):
        session.run([])
    with pytest.raises(trainrt.ShapeError, match="dtype f64"):
        session.run([np.ones((2, 8), np.float64)])
    with pytest.raises(trainrt.ShapeError, match=r"'x' has shape \(2, 7\)"):
        session.run([np.ones((2, 7), np.float32)])


def test_malformed_model_bytes_raise_invalid_model():
    with pytest.raises(trainrt.InvalidModel):
        trainrt.Session(b"\x0a\xff\xff\xff\xff\x0f garbage")


def test_unknown_op_names_node_and_op():
    node = helper.make_node("FancyOp", ["x"], ["y"], name="fancy1", domain="com.example")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)])
    with pytest.raises(trainrt.UnsupportedOp, match="fancy1.*FancyOp"):
        trainrt.Session(model.SerializeToString()).run([np.ones(2, np.float32)])


def test_profile_writes_chrome_trace(mlp_model, tmp_path):
    model, _ = mlp_model
    session = trainrt.Session(model, profile=True)
    session.run([np.ones((4, 8), np.float32)])
    path = tmp_path / "trace.json"
    session.write_profile(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    nodes = [e for e in events if e["ph"] == "X"]
    assert {e["args"]["op"] for e in nodes} >= {"MatMul", "Add", "Relu"}
    # A storage counter after each node: the arena (and the run's outputs) are engine storage.
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == len(nodes)
    assert all(e["name"] == "engine storage MiB" and e["args"]["live"] > 0 for e in counters)
    assert [c["ts"] for c in counters] == [n["ts"] + n["dur"] for n in nodes]
    assert "MatMul" in session.profile_summary()
