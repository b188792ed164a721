"""`trainrt train` trains an ONNX MLP on scikit-learn's digits from C++ alone, step for step like torch.

The same MLP (same initial weights), the same optimizer and the same batches run through the
`trainrt` CLI and through PyTorch eager; per-step losses must agree within 1e-4 relative for 100
steps, and a longer run must reach at least 95% test accuracy with the exported inference model.
"""

import re
import subprocess

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save_file
from sklearn.datasets import load_digits

import trainrt

BATCH = 32




def digits():
    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))  # writers mixed across the split
    x = (data.data[order] / 16.0).astype(np.float32)
    y = data.target[order].astype(np.int64)
    return x[:1400], y[:1400], x[1400:], y[1400:]


def torch_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def export_mlp(model, path):
    """The torch MLP as ONNX: Gemm(transB=1) is exactly nn.Linear."""
    w1, b1, w2, b2 = (p.detach().numpy().copy() for p in model.parameters())
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model_proto.ir_version = 9
    onnx.save(model_proto, path)


def run_cli(cli, model, data, steps, optimizer="adamw", lr="0.01", save=None, shuffle=False):
    cmd = [cli, "train", str(model), "--data", str(data), "--input", "x", "--label", "y",
           "--loss", "cross_entropy", "--optimizer", optimizer, "--lr", lr, "--batch", str(BATCH),
           "--steps", str(steps)] + ([] if shuffle else ["--no-shuffle"])
    if save:
        cmd += ["--save", str(save)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    losses = [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)$", out.stdout, re.M)]
    assert len(losses) == steps, out.stdout[-2000:]
    assert "throughput:" in out.stdout and "peak memory:" in out.stdout
    return losses


def torch_losses(x, y, steps, optimizer="adamw", lr=0.01):
    model = torch_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=lr) if optimizer == "adamw" else torch.optim.SGD(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    losses = []
    for step in range(steps):
        rows = [(step * BATCH + i) % len(x) for i in range(BATCH)]  # --no-shuffle: rows [i*B, (i+1)*B), wrapping
        loss = torch.nn.functional.cross_entropy(model(xt[rows]), yt[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def digits_files(tmp_path):
    x, y, x_test, y_test = digits()
    save_file({"x": x, "y": y}, str(tmp_path / "digits.safetensors"))
    export_mlp(torch_mlp(), str(tmp_path / "mlp.onnx"))
    return tmp_path / "mlp.onnx", tmp_path / "digits.safetensors", (x, y, x_test, y_test)


@pytest.mark.parametrize("optimizer,lr", [("adamw", "0.01"), ("sgd", "0.1")])
def test_cli_losses_match_torch_step_by_step(cli, digits_files, optimizer, lr):
    model, data, (x, y, _, _) = digits_files
    ours = run_cli(cli, model, data, 100, optimizer, lr)
    theirs = torch_losses(x, y, 100, optimizer, float(lr))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


@pytest.mark.slow
def test_cli_trained_model_reaches_95_percent_on_held_out_digits(cli, digits_files, tmp_path):
    model, data, (_, _, x_test, y_test) = digits_files
    out_dir = tmp_path / "trained"
    run_cli(cli, model, data, 1000, save=out_dir, shuffle=True)
    onnx.checker.check_model(str(out_dir / "model.onnx"), full_check=True)
    (logits,) = trainrt.Session(out_dir / "model.onnx").run([x_test])
    accuracy = float(np.mean(logits.argmax(axis=1) == y_test))
    assert accuracy >= 0.95, accuracy
    import onnxruntime as ort

    (ort_logits,) = ort.InferenceSession(str(out_dir / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x_test})
    np.testing.assert_allclose(logits, ort_logits, rtol=1e-4, atol=1e-5)
    assert (out_dir / "checkpoint.trainrt").stat().st_size > 0


def test_cli_bad_arguments_give_clear_errors(cli, digits_files, tmp_path):
    model, data, _ = digits_files
    out = subprocess.run([cli, "train", str(model), "--data", str(data), "--input", "x", "--label", "nope",
                          "--loss", "cross_entropy", "--optimizer", "adamw", "--lr", "0.01", "--batch", "8", "--steps", "1"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "no tensor 'nope'" in out.stderr
    out = subprocess.run([cli, "train", str(model), "--data", str(tmp_path / "missing.safetensors"), "--input", "x",
                          "--label", "y", "--loss", "hinge", "--optimizer", "adamw", "--lr", "0.01", "--batch", "8", "--steps", "1"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "hinge" in out.stderr
