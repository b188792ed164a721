"""ONNX If, Loop and Scan as the exporters write them: torch.cond exported by torch.onnx.export
(dynamo) runs in Session as torch and onnxruntime do, trains in TrainingSession with torch's losses and
gradients whichever branch each batch takes, and is written back as an inference model onnxruntime
reads; Loop and Scan bodies that read the enclosing graph run as onnxruntime runs them, and train
with the gradients of the same loops written in torch."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import trainrt
from conftest import make_model

RNG = np.random.default_rng(0)


class Branchy(torch.nn.Module):
    """Two branches sharing a Linear; only one reads `scale` (its gradient is zero the other way)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):  # x (batch, 4)
        def positive(x):
            return self.lin(x).relu() * self.scale

        def other(x):
            return torch.tanh(self.lin(x)) - x

        return torch.cond(x.sum() > 0, positive, other, (x,))


@pytest.fixture(scope="module")
def branchy(tmp_path_factory):
    torch.manual_seed(0)
    model = Branchy()
    path = tmp_path_factory.mktemp("cond") / "branchy.onnx"
    program = torch.onnx.export(model, (torch.randn(3, 4),), dynamo=True, dynamic_shapes=({0: "batch"},))
    assert "If" in {n.op_type for n in program.model_proto.graph.node}
    program.save(str(path))
    return model, path, program.model_proto.graph.output[0].name


def batches():  # each branch, at several batch sizes
    for batch, sign in ((3, 1), (3, -1), (5, 1), (2, -1), (4, -1)):
        yield sign * np.abs(RNG.standard_normal((batch, 4))).astype(np.float32)


def test_exported_cond_runs_as_torch_and_onnxruntime(branchy):
    model, path, _ = branchy
    session, reference = trainrt.Session(path), ort.InferenceSession(str(path))
    for x in batches():
        (ours,) = session.run([x])
        (theirs,) = reference.run(None, {"x": x})
        expected = model(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(theirs, expected, rtol=1e-6, atol=1e-6)


def test_exported_cond_trains_with_torchs_gradients_on_both_branches(branchy, tmp_path):
    model, path, output = branchy
    trainer = trainrt.TrainingSession(path, append_loss="mse", output=output, label="label", optimizer="sgd", lr=0.0)
    params = dict(model.named_parameters())
    assert set(params) <= set(trainer.parameter_names)
    for x in batches():
        label = RNG.standard_normal(x.shape).astype(np.float32)
        loss = trainer.train_step([x, label])
        model.zero_grad()
        expected = torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(label))
        expected.backward()
        assert loss == pytest.approx(expected.item(), rel=1e-6)
        for name, p in params.items():
            np.testing.assert_allclose(trainer.gradient(name), p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
        trainer.reset_grad()
    # The trained model written for inference keeps its If (outer-scope reads again): onnxruntime reads it.
    inference = tmp_path / "inference.onnx"
    trainer.export_inference_model(str(inference), [output])
    for x in batches():
        (theirs,) = ort.InferenceSession(str(inference)).run(None, {"x": x})
        np.testing.assert_allclose(theirs, model(torch.from_numpy(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_sgd_steps_through_a_cond_follow_torch(branchy):
    model, path, output = branchy
    constants = [t.name for t in onnx.load(str(path)).graph.initializer if t.name not in dict(model.named_parameters())]
    ours = trainrt.TrainingSession(path, append_loss="mse", output=output, label="label", optimizer="sgd", lr=0.1,
                                   frozen=constants)
    theirs = Branchy()
    theirs.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(theirs.parameters(), lr=0.1)
    for x in batches():
        label = RNG.standard_normal(x.shape).astype(np.float32)
        loss = ours.train_step([x, label])
        ours.optimizer_step()
        ours.reset_grad()
        optimizer.zero_grad()
        expected = torch.nn.functional.mse_loss(theirs(torch.from_numpy(x)), torch.from_numpy(label))
        expected.backward()
        optimizer.step()
        assert loss == pytest.approx(expected.item(), rel=1e-5)
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(ours.parameter(name), p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def loop_model() -> bytes:
    """Loop(n): s <- s * w + x[i] (w and x read from the enclosing graph), scan output s each step;
    stops early when the running sum's first entry passes `limit`."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
            helper.make_node("Mul", ["s_in", "w"], ["scaled"]),
            helper.make_node("Add", ["scaled", "row"], ["s_out"]),
            helper.make_node("Gather", ["s_out", "zero"], ["first"], axis=0),
            helper.make_node("Less", ["first", "limit"], ["c_out"]),
            helper.make_node("Identity", ["s_out"], ["trace"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("trace", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    return make_model(
        [helper.make_node("Loop", ["n", "", "s"], ["s_final", "traces"], body=body)],
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["steps", 3]),
         helper.make_tensor_value_info("limit", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("s_final", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("traces", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")], opset=17)


@pytest.mark.parametrize("n, steps, limit", [(6, 6, 100.0), (6, 6, 1.0), (3, 5, 100.0), (0, 4, 100.0)])
def test_loop_reading_the_enclosing_graph_runs_as_onnxruntime(n, steps, limit):
    model = loop_model()
    feeds = {"n": np.array(n, np.int64), "s": RNG.standard_normal(3).astype(np.float32),
             "x": RNG.standard_normal((steps, 3)).astype(np.float32) + 0.5, "limit": np.array(limit, np.float32)}
    ours = trainrt.Session(model).run(list(feeds.values()))
    theirs = ort.InferenceSession(model).run(None, feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("n, limit", [(5, 100.0), (5, 1.0), (0, 100.0)])
def test_loop_trains_with_torchs_gradients(n, limit):
    """The same loop in torch (stopping where the model's condition stops it): the loss on the final
    value and the traces, and w's gradient, match; zero iterations give w no gradient (zeros)."""
    trainer = trainrt.TrainingSession(loop_model(), append_loss="mse", output="s_final", label="label",
                                      optimizer="sgd", lr=0.0)
    s0 = RNG.standard_normal(3).astype(np.float32)
    x = RNG.standard_normal((5, 3)).astype(np.float32) + 0.5
    label = RNG.standard_normal(3).astype(np.float32)
    loss = trainer.train_step([np.array(n, np.int64), s0, x, np.array(limit, np.float32), label])
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    state = torch.from_numpy(s0)
    for i in range(n):
        state = state * w + torch.from_numpy(x[i])
        if not state[0] < limit:
            break
    expected = torch.nn.functional.mse_loss(state, torch.from_numpy(label))
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    if expected.requires_grad:  # no iteration: the loss does not read w
        expected.backward()
    grad = torch.zeros(3) if w.grad is None else w.grad
    np.testing.assert_allclose(trainer.gradient("w"), grad.numpy(), rtol=1e-5, atol=1e-6)


def rnn_scan_model(u: np.ndarray) -> bytes:
    """Scan over axis 1 of x (batch, T, 4), reversed: h <- tanh(h @ u + x_t), outputs stacked on
    axis 0 (T, batch, 4); u an initializer (a parameter to train), h0 an input."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "u"], ["hu"]), helper.make_node("Add", ["hu", "x_t"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_next"]), helper.make_node("Identity", ["h_next"], ["out"])],
        "body",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])])
    model = make_model(
        [helper.make_node("Scan", ["h0", "x"], ["h_last", "hs"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1])],
        [helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "steps", 4])],
        [helper.make_tensor_value_info("h_last", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("hs", TensorProto.FLOAT, ["steps", "batch", 4])],
        [numpy_helper.from_array(u, "u")], opset=17)
    return model


def test_scan_over_an_inner_axis_in_reverse_runs_as_onnxruntime():
    model = rnn_scan_model(RNG.standard_normal((4, 4)).astype(np.float32) * 0.5)
    session, reference = trainrt.Session(model), ort.InferenceSession(model)
    for batch, steps in ((2, 5), (3, 1), (1, 7)):
        feeds = {"h0": RNG.standard_normal((batch, 4)).astype(np.float32),
                 "x": RNG.standard_normal((batch, steps, 4)).astype(np.float32)}
        for a, b in zip(session.run(list(feeds.values())), reference.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_scan_trains_with_torchs_gradients():
    """The same reversed RNN in torch, as a loop: the loss and u's gradient match, and the state
    history the gradient needs is the engine's own (Scan's gradient recomputes it)."""
    u = RNG.standard_normal((4, 4)).astype(np.float32) * 0.5
    trainer = trainrt.TrainingSession(rnn_scan_model(u), append_loss="mse", output="hs", label="label",
                                      optimizer="sgd", lr=0.0)
    for batch, steps in ((2, 5), (3, 1), (2, 3)):
        h0 = RNG.standard_normal((batch, 4)).astype(np.float32)
        x = RNG.standard_normal((batch, steps, 4)).astype(np.float32)
        label = RNG.standard_normal((steps, batch, 4)).astype(np.float32)
        loss = trainer.train_step([h0, x, label])
        weight = torch.tensor(u, requires_grad=True)
        h, outs = torch.from_numpy(h0), []
        for t in reversed(range(steps)):
            h = torch.tanh(h @ weight + torch.from_numpy(x[:, t]))
            outs.append(h)
        expected = torch.nn.functional.mse_loss(torch.stack(outs), torch.from_numpy(label))
        expected.backward()
        assert loss == pytest.approx(expected.item(), rel=1e-5)
        np.testing.assert_allclose(trainer.gradient("u"), weight.grad.numpy(), rtol=1e-4, atol=1e-6)
        trainer.reset_grad()
