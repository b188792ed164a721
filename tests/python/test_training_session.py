"""The Python TrainingSession: the C++ training API on numpy arrays."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import trainrt
from conftest import make_model


def linear_model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(np.zeros((3, 1), np.float32), "w"), numpy_helper.from_array(np.zeros(1, np.float32), "b")],
    )


def batch(step):
    x = np.random.default_rng(step).standard_normal((16, 3)).astype(np.float32)
    return x, x @ np.array([[2.0], [-1.0], [0.5]], np.float32) + 0.3


def test_sgd_learns_a_linear_map_and_checkpoints_round_trip(tmp_path):
    trainer = trainrt.TrainingSession(linear_model(), append_loss="mse", output="y", label="label",
                                      optimizer="sgd", lr=0.1)
    assert sorted(trainer.parameter_names) == ["b", "w"]
    losses = []
    for step in range(200):
        losses.append(trainer.train_step(list(batch(step))))
        trainer.optimizer_step()
    assert losses[-1] < 1e-4 * losses[0]
    np.testing.assert_allclose(trainer.parameter("w").ravel(), [2.0, -1.0, 0.5], atol=1e-2)
    assert trainer.step == 200

    trainer.save_checkpoint(str(tmp_path / "ckpt"))
    other = trainrt.TrainingSession(linear_model(), append_loss="mse", output="y", label="label", optimizer="sgd", lr=0.1)
    other.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(other.parameter("w"), trainer.parameter("w"))
    assert other.step == 200

    trainer.export_inference_model(str(tmp_path / "trained.onnx"), ["y"])
    x, _ = batch(999)
    (y,) = trainrt.Session(tmp_path / "trained.onnx").run([x])
    np.testing.assert_allclose(y, x @ trainer.parameter("w") + trainer.parameter("b"), rtol=1e-5, atol=1e-6)


def test_learning_rate_schedule_and_errors():
    trainer = trainrt.TrainingSession(linear_model(), append_loss="mse", output="y", label="label",
                                      optimizer="adamw", lr=1e-2, warmup_steps=4)
    assert trainer.learning_rate == pytest.approx(1e-2 / 4)
    trainer.learning_rate = 1.0
    assert trainer.learning_rate == pytest.approx(0.25)
    with pytest.raises(trainrt.InvalidModel, match="train_step"):
        trainer.optimizer_step()
    with pytest.raises(trainrt.InvalidModel, match="optimizer"):
        trainrt.TrainingSession(linear_model(), append_loss="mse", output="y", label="label", optimizer="lion")
    with pytest.raises(trainrt.ShapeError):
        trainer.train_step([np.ones((2, 4), np.float32), np.ones((2, 1), np.float32)])


def test_a_bf16_model_with_an_f32_only_op_trains_as_torch():
    """BatchNormalization (f32 / f64 in the engine) of bf16 values runs between casts
    (passes/low_precision_compute.h): loss and gradients as torch's in bf16."""
    import torch

    rng = np.random.default_rng(0)
    c = 3
    values = {"scale": rng.uniform(0.5, 1.5, c), "bias": rng.standard_normal(c), "mean": rng.standard_normal(c) * 0.1,
              "var": rng.uniform(0.5, 2, c)}
    inits = [helper.make_tensor(k, TensorProto.BFLOAT16, [c], v.astype(np.float32).tolist()) for k, v in values.items()]
    inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("BatchNormalization", ["xb", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", c])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    trainer = trainrt.TrainingSession(model, append_loss="mse", output="y", label="label", optimizer="sgd", lr=0.1,
                                      frozen=["mean", "var"])
    x = rng.standard_normal((2, c, 4, 4)).astype(np.float32)
    label = rng.standard_normal((2, c)).astype(np.float32)
    loss = trainer.train_step([x, label])

    t = {k: torch.tensor(v, dtype=torch.float32).bfloat16() for k, v in values.items()}
    scale, bias = t["scale"].requires_grad_(), t["bias"].requires_grad_()
    y = torch.relu(torch.nn.functional.batch_norm(torch.tensor(x).bfloat16(), t["mean"], t["var"], scale, bias))
    expected = torch.nn.functional.mse_loss(y.mean((2, 3)).float(), torch.tensor(label))
    expected.backward()
    assert loss == pytest.approx(expected.item(), rel=1e-2)
    for name, p in (("scale", scale), ("bias", bias)):
        got = trainer.gradient(name)
        assert got.dtype.name == "bfloat16" and trainer.parameter(name).dtype.name == "bfloat16"  # ml_dtypes'
        np.testing.assert_allclose(got.astype(np.float32), p.grad.float().numpy(), rtol=2e-2, atol=1e-3, err_msg=name)
    evaluated = trainer.eval_step([x, label])  # the evaluation session runs the bf16 model too
    assert any(np.asarray(v).shape == (2, c) for v in evaluated)
