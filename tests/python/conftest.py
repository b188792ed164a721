"""Shared helpers for the Python tests: small ONNX models built with onnx.helper, the CLI's path."""

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture
def mlp_model():
    """x: (batch, 8) -> Relu(x @ w1 + b1) @ w2 + b2 : (batch, 3), with its numpy reference."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    b1 = rng.standard_normal(16).astype(np.float32)
    w2 = rng.standard_normal((16, 3)).astype(np.float32)
    b2 = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )

    def reference(x):
        return np.maximum(x @ w1 + b1, 0) @ w2 + b2

    return model, reference


ROOT = pathlib.Path(__file__).resolve().parents[2]


def pytest_sessionstart(session):
    """DeepSpeed JIT-builds its CPU shared-memory op (~45 s, once) under torch's extensions dir. A build
    killed midway leaves its `lock` file, and every later build waits on it forever: CI hung on one left
    in the home directory. The tests build in this clone's build/ instead, and a lock found there when
    the session starts belongs to a dead run (nothing in this session is building yet)."""
    if "TORCH_EXTENSIONS_DIR" in os.environ:  # the user's own, maybe shared: left as it is
        return
    extensions = ROOT / "build" / "torch_extensions"
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions)
    for lock in extensions.glob("*/lock"):
        lock.unlink()


@pytest.fixture
def cli() -> str:
    """The trainrt CLI: $TRAINRT_CLI (set by `make test`), else the newest build/*/trainrt."""
    path = os.environ.get("TRAINRT_CLI")
    if not path:
        built = [p for p in ROOT.glob("build/*/trainrt") if p.is_file()]
        path = str(max(built, key=lambda p: p.stat().st_mtime)) if built else None
    if not path or not os.access(path, os.X_OK):
        pytest.fail("the trainrt CLI is not built (set TRAINRT_CLI or run `make build`)")
    return path


@pytest.fixture
def trainrt_log(caplog):
    """caplog over the "trainrt" logger, which does not propagate to the root logger caplog listens on
    (RTModule gives it a handler of its own so messages reach users without logging configuration)."""
    import logging

    import trainrt.rtmodule  # noqa: F401  (sets up the logger)

    logger = logging.getLogger("trainrt")
    propagate, logger.propagate = logger.propagate, True
    try:
        with caplog.at_level("WARNING", logger="trainrt"):
            yield caplog
    finally:
        logger.propagate = propagate
