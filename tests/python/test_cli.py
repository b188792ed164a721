"""The `trainrt` CLI: inspect and run ONNX models without Python in the loop."""

import json
import subprocess

import pytest

from onnx_gpt import transformer_model





@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "gpt.onnx"
    path.write_bytes(transformer_model(layers=1, hidden=32, heads=2, vocab=100, seq=8))
    return path


def test_inspect_prints_histogram_parameters_shapes_and_memory(cli, model_file):
    out = subprocess.run([cli, "inspect", str(model_file), "--dim", "batch=4"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "MatMul" in out.stdout and "LayerNormalization" in out.stdout
    assert "parameters:" in out.stdout
    assert "f32(batch, 8, 100)" in out.stdout  # inferred symbolic shape of the logits
    assert "planned peak memory" in out.stdout


def test_inspect_names_unknown_ops_with_counts_and_shows_the_part_before_them(cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("FrobOp", ["a"], ["b"], domain="x.y"),
             helper.make_node("FrobOp", ["b"], ["c"], domain="x.y"), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "unknown.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("x.y", 1)]),
              str(path))
    out = subprocess.run([cli, "inspect", str(path), "--dim", "n=2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "does not support (nodes): x.y::FrobOp 2" in out.stdout
    assert "%a: f32(n, 4) = Relu(%x)" in out.stdout  # the shape before the unknown op
    assert "planned peak memory" in out.stdout


def test_run_prints_outputs_time_memory_and_writes_a_trace(cli, model_file, tmp_path):
    trace = tmp_path / "trace.json"
    out = subprocess.run([cli, "run", str(model_file), "--dim", "batch=2", "--profile", str(trace), "--repeat", "3"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "output logits: f32(2, 8, 100)" in out.stdout
    assert "median" in out.stdout and "peak memory" in out.stdout
    assert json.loads(trace.read_text())["traceEvents"]


def test_errors_name_the_problem(cli, model_file, tmp_path):
    out = subprocess.run([cli, "run", str(model_file)], capture_output=True, text=True)
    assert out.returncode == 1 and "--dim batch=VALUE" in out.stderr
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(model_file.read_bytes()[:100])
    out = subprocess.run([cli, "inspect", str(bad)], capture_output=True, text=True)
    assert out.returncode == 1 and "bad.onnx" in out.stderr
    out = subprocess.run([cli, "frobnicate"], capture_output=True, text=True)
    assert out.returncode == 2
