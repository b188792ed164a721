"""ONNX files as torch.onnx.export(dynamo=True) writes them, from tiny HF models (BERT sequence
classification, ViT), run by the engine's inference Session with no torch in the loop: the logits
match eager's and onnxruntime's. The exporter decomposes attention with an IsNaN guard around the softmax, which
these files need. (Training them with TrainingSession against eager is not checked here yet: the
exporter's optimizer folds and transposes weights, so its parameters are not the model's.)"""

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
    torch.onnx.export(model, (x,), str(path), dynamo=True)
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
