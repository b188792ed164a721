"""The installed C++ package: `cmake --install` of the build into a temporary prefix, then
examples/cpp built against that prefix alone, twice: through find_package(TrainRT CONFIG) and
through pkg-config. Each trains an ONNX MLP (the loss must fall) and writes the inference model,
which trainrt.Session then runs. Nothing here reads the build tree's headers or libraries."""

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import trainrt

pytestmark = pytest.mark.slow  # an install and two small C++ builds

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINRT_BUILD_DIR", ROOT / "build" / "release"))
TOOLS = pathlib.Path(sys.executable).parent  # the venv's cmake and ninja (requirements.txt)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(TOOLS)) or shutil.which(name)
    assert found, f"{name} not found"
    return found


def _run(*cmd, env=None) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    assert (BUILD / "CMakeCache.txt").exists(), f"no build in {BUILD} (make build)"
    p = tmp_path_factory.mktemp("prefix")
    _run(_tool("cmake"), "--install", BUILD, "--prefix", p)
    return p


def _mlp(path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(32, np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((32, 5)) * 0.2).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["logits"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_install_holds_the_public_headers_the_libraries_and_the_package_files(prefix):
    assert (prefix / "include/trainrt/trainrt.h").exists()
    assert (prefix / "include/trainrt/train/training_session.h").exists()
    assert not (prefix / "include/trainrt/kernels/cpu").exists()  # internal: not reached from trainrt.h
    assert (prefix / "lib/cmake/TrainRT/TrainRTConfig.cmake").exists()
    assert (prefix / "lib/pkgconfig/trainrt.pc").exists()
    assert (prefix / "lib/libtrainrt_train.a").exists()
    assert (prefix / "bin/trainrt").exists()


def _train_and_check(exe, tmp_path):
    model, trained = tmp_path / "mlp.onnx", tmp_path / "trained.onnx"
    _mlp(model)
    out = _run(exe, model, "logits", trained, 20)
    assert "loss" in out and trained.exists()
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    (logits,) = trainrt.Session(str(trained)).run([x])
    assert np.asarray(logits).shape == (3, 5)


def test_example_builds_with_find_package_against_the_prefix(prefix, tmp_path):
    build = tmp_path / "build"
    _run(_tool("cmake"), "-S", ROOT / "examples/cpp", "-B", build, "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", f"-DCMAKE_PREFIX_PATH={prefix}")
    _run(_tool("cmake"), "--build", build)
    _train_and_check(build / "train_onnx", tmp_path)


def test_example_builds_with_pkg_config_against_the_prefix(prefix, tmp_path):
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    flags = _run("pkg-config", "--cflags", "--libs", "trainrt", env=env).split()
    exe = tmp_path / "train_onnx"
    _run("g++", "-O1", ROOT / "examples/cpp/train_onnx.cc", "-o", exe, *flags)
    _train_and_check(exe, tmp_path)
