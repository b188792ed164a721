"""`make bench-peers`' two halves without the peers' venv: peers.py loads the suite's models without
the engine (it runs under torch 2.4.1, which TrainRT's extension is not for), and the suite's report
times TrainingSession on the peers' ONNX files and gives TrainRT's ratio to each peer."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trainrt.bench import peer_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_peers_script_reads_the_suite_models_without_the_engine():
    code = ("import runpy, sys; ns = runpy.run_path('python/trainrt/bench/peers.py', run_name='peers'); "
            "models = ns['_bench_models'](); print(sorted(models)); print('trainrt._C' in sys.modules); "
            "spec = models['mlp'](); print(float(spec.make()(*spec.batch(0))) > 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    names, engine_loaded, loss = out.stdout.split("\n")[:3]
    assert "gpt2-mini" in names and "bert-mini" in names
    assert engine_loaded == "False" and loss == "True"


def _logits_mlp(path: str) -> None:
    """x (4, 8) -> MatMul, Add, Relu, MatMul -> logits (4, 3): the shape of the peers' MLP file."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
             for name, shape in (("w1", (8, 16)), ("b1", (16,)), ("w2", (16, 3)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["logits"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_the_report_times_training_session_on_the_peers_files_and_gives_ratios(tmp_path):
    _logits_mlp(str(tmp_path / "mlp.onnx"))
    rng = np.random.default_rng(1)
    np.save(tmp_path / "mlp.x.npy", rng.normal(size=(4, 8)).astype(np.float32))
    np.save(tmp_path / "mlp.y.npy", np.array([0, 2, 1, 2], dtype=np.int64))
    peers = {"torch": "2.4.1", "onnxruntime": "1.19.2", "warmup": 1, "steps": 3,
             "models": {"mlp": {"modes": {"ortmodule": {"step_median_s": 0.020}, "eager": {"error": "RuntimeError: x"}}}},
             "training_api": {"mlp": {"onnx": "/elsewhere/mlp.onnx", "x": "mlp.x.npy", "y": "mlp.y.npy",
                                      "ort": {"step_median_s": 0.010, "first_step_s": 0.2}}}}
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    report = peer_report.run(peer_report.load(str(tmp_path / "peers.json")),
                             {"models": [{"model": "mlp", "modes": {"rtmodule": {"step_median_s": 0.005}}}]})
    (row,) = report["rtmodule"]
    assert row["ratio_to_ortmodule"] == 0.25 and row["ratio_to_eager"] is None and row["eager_error"]
    (api,) = report["training_api"]
    session = api["training_session"]
    assert "error" not in session, session
    assert session["steps"] == 3 and session["step_median_s"] > 0
    assert abs(session["first_loss"] - np.log(3)) < 1.0  # cross-entropy of 3 classes near uniform logits
    assert api["ratio"] == session["step_median_s"] / 0.010
    text = peer_report.markdown(report)
    assert "| mlp | 5.0 | 20.0 | 0.25x | - | - |" in text and "TrainingSession" in text


def test_without_the_peers_results_there_is_no_report(tmp_path):
    assert peer_report.load(str(tmp_path / "absent.json")) is None
