"""Autodiff gradients of an ONNX model equal torch autograd's on the same computation."""

import numpy as np
import torch
from onnx import TensorProto, helper, numpy_helper

import trainrt
from conftest import make_model


def test_transformer_block_gradients_match_torch_autograd():
    """LayerNorm -> attention (MatMul, Softmax with causal mask) -> GELU MLP -> residuals -> CE loss."""
    torch.manual_seed(0)
    B, T, C, V = 2, 6, 16, 11
    ln_g = torch.randn(C) * 0.1 + 1
    ln_b = torch.randn(C) * 0.1
    wq, wk, wv, wo = (torch.randn(C, C) * 0.2 for _ in range(4))
    w1, b1, w2 = torch.randn(C, 4 * C) * 0.2, torch.randn(4 * C) * 0.1, torch.randn(4 * C, C) * 0.2
    wout = torch.randn(C, V) * 0.2
    params = {"ln_g": ln_g, "ln_b": ln_b, "wq": wq, "wk": wk, "wv": wv, "wo": wo, "w1": w1, "b1": b1, "w2": w2, "wout": wout}
    x = torch.randn(B, T, C)
    labels = torch.randint(0, V, (B, T))
    mask = torch.triu(torch.full((T, T), -1e9), 1)

    def torch_loss(p):
        h = torch.nn.functional.layer_norm(x, (C,), p["ln_g"], p["ln_b"], eps=1e-5)
        q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
        att = torch.softmax(q @ k.transpose(1, 2) / np.sqrt(C) + mask, dim=-1) @ v
        r = x + att @ p["wo"]
        r = r + torch.nn.functional.gelu(r @ p["w1"] + p["b1"], approximate="tanh") @ p["w2"]
        logits = (r @ p["wout"]).transpose(1, 2)  # (B, V, T) for the (N, C, d) loss layout
        return torch.nn.functional.cross_entropy(logits, labels)

    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    torch_loss(leaves).backward()

    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln_g", "ln_b"], ["h"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h", "wq"], ["q"]), n("MatMul", ["h", "wk"], ["k"]), n("MatMul", ["h", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q", "kt"], ["s0"]),
        n("Mul", ["s0", "scale"], ["s1"]), n("Add", ["s1", "mask"], ["s2"]), n("Softmax", ["s2"], ["pr"], axis=-1),
        n("MatMul", ["pr", "v"], ["att"]), n("MatMul", ["att", "wo"], ["ao"]), n("Add", ["x", "ao"], ["r1"]),
        n("MatMul", ["r1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]), n("Gelu", ["f1"], ["f2"], approximate="tanh"),
        n("MatMul", ["f2", "w2"], ["f3"]), n("Add", ["r1", "f3"], ["r2"]), n("MatMul", ["r2", "wout"], ["lg"]),
        n("Transpose", ["lg"], ["logits"], perm=[0, 2, 1]),
    ]
    inits = [numpy_helper.from_array(v.numpy(), k) for k, v in params.items()]
    inits += [numpy_helper.from_array(np.array(1 / np.sqrt(C), np.float32), "scale"),
              numpy_helper.from_array(mask.numpy(), "mask")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", T, C])],
                       [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", V, T])], inits, opset=20)
    trainer = trainrt.TrainingSession(model, append_loss="cross_entropy", output="logits", label="labels",
                                      frozen=["scale", "mask"])
    loss = trainer.train_step([x.numpy(), labels.numpy()])
    assert abs(loss - torch_loss(params).item()) < 1e-5 * abs(loss)
    for name, leaf in leaves.items():
        np.testing.assert_allclose(trainer.gradient(name), leaf.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_amax_gradient_through_rtmodule_for_every_reduced_size(monkeypatch):
    """amax's gradient reads a bool mask of the maxima: a reduced axis of 4 made the (4, 8) bool mask
    exactly as many bytes as the saved (1, 8) f32 maxima, and the planner wrote the mask over them in
    place while Equal still read them (NaN gradients). Sizes 2 to 8, on a middle and a leading axis."""
    import pytest

    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")

    class AMax(torch.nn.Module):
        def __init__(self, shape, dim):
            super().__init__()
            self.w, self.dim = torch.nn.Parameter(torch.randn(*shape)), dim

        def forward(self, x):
            return (self.w * x).amax(dim=self.dim).sum()

    for shape, dim in [((3, n, 8), 1) for n in range(2, 9)] + [((n, 8), 0) for n in (2, 4, 8)]:
        torch.manual_seed(0)
        eager, x = AMax(shape, dim), torch.randn(*shape)
        model = trainrt.RTModule(AMax(shape, dim))
        model.load_state_dict(eager.state_dict())
        model(x).backward()
        eager(x).backward()
        assert model.fallback_reason is None
        assert torch.allclose(model.w.grad, eager.w.grad), (shape, dim)
