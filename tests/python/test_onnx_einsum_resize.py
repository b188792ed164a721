"""ONNX models with Einsum and Resize (as torch.onnx.export writes them) train in TrainingSession:
the loss and every parameter gradient match torch computing the same thing from the same weights,
over batch sizes; and a model torch.onnx.export(dynamo=True) wrote with both ops runs in Session
with torch's outputs."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

import trainrt
from conftest import make_model

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 5)).astype(np.float32)
V = RNG.standard_normal((2, 5)).astype(np.float32)


def einsum_resize_model(resize_attrs: dict) -> bytes:
    """x (batch, 3, 4) -> einsum bij,jk->bik with w (4, 5) -> einsum bik,ck->bcik with v (2, 5)
    -> Resize x2 over the last two axes -> y (batch, 2, 6, 10)."""
    nodes = [
        helper.make_node("Einsum", ["x", "w"], ["xw"], equation="bij,jk->bik"),
        helper.make_node("Einsum", ["xw", "v"], ["xv"], equation="b i k, c k -> b c i k"),
        helper.make_node("Resize", ["xv", "", "scales"], ["y"], **resize_attrs),
    ]
    return make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 6, 10])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(V, "v"),
         numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], opset=19)


def torch_reference(x: np.ndarray, label: np.ndarray, mode: str, align_corners):
    w, v = torch.tensor(W, requires_grad=True), torch.tensor(V, requires_grad=True)
    xv = torch.einsum("bik,ck->bcik", torch.einsum("bij,jk->bik", torch.tensor(x), w), v)
    y = F.interpolate(xv, scale_factor=2, mode=mode, align_corners=align_corners)
    loss = F.mse_loss(y, torch.tensor(label))
    loss.backward()
    return loss.item(), w.grad.numpy(), v.grad.numpy()


@pytest.mark.parametrize("attrs, mode, align_corners", [
    ({"mode": "linear"}, "bilinear", False),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, "bilinear", True),
    ({"mode": "cubic"}, "bicubic", False),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, "nearest", None),
])
def test_einsum_and_resize_train_with_torchs_gradients(attrs, mode, align_corners):
    trainer = trainrt.TrainingSession(einsum_resize_model(attrs), append_loss="mse", output="y", label="label",
                                      optimizer="sgd", lr=0.0)
    for batch in (2, 5):
        x = RNG.standard_normal((batch, 3, 4)).astype(np.float32)
        label = RNG.standard_normal((batch, 2, 6, 10)).astype(np.float32)
        loss = trainer.train_step([x, label])
        expected, dw, dv = torch_reference(x, label, mode, align_corners)
        assert loss == pytest.approx(expected, rel=1e-5)
        np.testing.assert_allclose(trainer.gradient("w"), dw, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(trainer.gradient("v"), dv, rtol=1e-4, atol=1e-6)
        trainer.reset_grad()


def test_a_dynamo_export_with_einsum_and_upsampling_runs_in_session(tmp_path):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x):  # x (batch, 2, 3, 4)
            mixed = torch.einsum("bchw,dw->bchd", x, self.proj.weight)
            return F.interpolate(mixed, scale_factor=2, mode="bilinear")

    torch.manual_seed(0)
    model, x = Model().eval(), torch.randn(2, 2, 3, 4)
    path = tmp_path / "model.onnx"
    program = torch.onnx.export(model, (x,), dynamo=True)
    assert {"Einsum", "Resize"} <= {n.op_type for n in program.model_proto.graph.node}
    program.save(str(path))
    (y,) = trainrt.Session(path).run([x.numpy()])
    np.testing.assert_allclose(y, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_an_exported_group_norm_trains_with_torchs_gradients(tmp_path):
    """torch.onnx writes GroupNorm as InstanceNormalization over the groups, then the per-channel
    affine through Unsqueezes whose axes it computes (so their rank is unknown at plan time): the
    broadcast gradients must still be summed back to (C,)."""
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2), norm.bias.uniform_(-1, 1)
    x = torch.randn(3, 4, 2, 5)
    program = torch.onnx.export(norm, (x,), dynamo=True, optimize=False)
    assert "InstanceNormalization" in {n.op_type for n in program.model_proto.graph.node}
    program.save(str(tmp_path / "norm.onnx"))
    label = torch.randn(3, 4, 2, 5)
    trainer = trainrt.TrainingSession(str(tmp_path / "norm.onnx"), append_loss="mse",
                                      output=program.model_proto.graph.output[0].name, label="label",
                                      optimizer="sgd", lr=0.0)
    loss = trainer.train_step([x.numpy(), label.numpy()])
    expected = F.mse_loss(norm(x), label)
    expected.backward()
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    np.testing.assert_allclose(trainer.gradient("weight"), norm.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(trainer.gradient("bias"), norm.bias.grad.numpy(), rtol=1e-4, atol=1e-6)
