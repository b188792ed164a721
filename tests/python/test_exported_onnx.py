"""ONNX files as torch.onnx.export(dynamo=True) writes them, from tiny HF models (BERT sequence
classification, ViT), run by the engine's inference Session with no torch in the loop: the logits
match eager's and onnxruntime's. The exporter decomposes attention with an IsNaN guard around the softmax, which
these files need. Exported with `optimize=False`, the files keep the model's parameters by name,
and TrainingSession (cross-entropy appended, SGD with momentum) follows eager training from the same
weights over 5 steps. (The exporter's default optimizer transposes weights into new constants and
merges initializers of equal values, such as every LayerNorm's initial ones, into one tensor: a file
that trains those tied, not the model.)"""

import copy

import numpy as np
import onnx
import pytest
import torch

import trainrt

transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript")  # the dynamo exporter's op library
pytestmark = pytest.mark.slow  # two exports, a few seconds each


def _bert():
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=100, num_labels=3, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config), lambda g: torch.randint(0, 100, (4, 16), generator=g)


def _vit():
    config = transformers.ViTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=3, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    return transformers.ViTForImageClassification(config), lambda g: torch.randn(4, 3, 32, 32, generator=g)


@pytest.fixture(params=["bert", "vit"])
def exported(request, tmp_path):
    torch.manual_seed(0)
    model, make_input = {"bert": _bert, "vit": _vit}[request.param]()
    model.eval()  # the exporter's graph; no dropout in either config, so training computes the same
    x = make_input(torch.Generator().manual_seed(0))
    path = tmp_path / f"{request.param}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=True, optimize=request.node.get_closest_marker("raw") is None)
    return model, make_input, path


def _logits_name(path) -> str:
    return onnx.load(str(path)).graph.output[0].name


def test_inference_session_matches_eager(exported):
    model, make_input, path = exported
    x = make_input(torch.Generator().manual_seed(0))
    (got,) = trainrt.Session(str(path)).run([x.numpy()])
    with torch.no_grad():
        want = model(x).logits
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=1e-5)
    ort = pytest.importorskip("onnxruntime")
    (reference,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {
        ort.InferenceSession(str(path)).get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(np.asarray(got), reference, rtol=1e-4, atol=1e-5)


@pytest.mark.raw  # optimize=False: the file's initializers are the model's parameters
def test_training_session_follows_eager_training(exported):
    model, make_input, path = exported
    names = {i.name for i in onnx.load(str(path)).graph.initializer}
    assert {n for n, _ in model.named_parameters()} <= names
    trainer = trainrt.TrainingSession(str(path), append_loss="cross_entropy", output=_logits_name(path),
                                      label="label", optimizer="sgd", lr=0.05, momentum=0.9)
    eager = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    for step in range(5):
        g = torch.Generator().manual_seed(step)
        x, y = make_input(g), torch.randint(0, 3, (4,), generator=g)
        loss = trainer.train_step([x.numpy(), y.numpy()])
        trainer.optimizer_step()
        optimizer.zero_grad()
        want = torch.nn.functional.cross_entropy(eager(x).logits, y)
        want.backward()
        optimizer.step()
        assert abs(loss - float(want.detach())) <= 1e-4 * abs(float(want.detach())), (step, loss, float(want))



def test_export_sweep_runs_and_trains_an_architecture():
    """python -m trainrt.coverage --onnx, on one architecture: exported, run as eager and
    onnxruntime, trained as eager."""
    from trainrt.coverage.architectures import architectures
    from trainrt.coverage.onnx_export import run_one, summary

    (arch,) = architectures(["seq-cls"], {"bert"})
    outcome = run_one(arch)
    assert (outcome.status, outcome.trained) == ("ok", True), outcome
    assert summary([outcome])[0].startswith("1 ran in TrainRT")
