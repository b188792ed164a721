"""ONNX import -> export through TrainRT: onnx.checker accepts the result and it computes the same."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.backend.test.loader import load_model_tests

import trainrt
from onnx_gpt import transformer_model

NODE_TESTS = {t.name: t for t in load_model_tests(kind="node")}
SAMPLE = ["test_add_bcast", "test_matmul_4d", "test_gemm_all_attributes", "test_softmax_axis_1",
          "test_layer_normalization_4d_axis1", "test_gather_negative_indices", "test_slice_neg_steps",
          "test_reshape_negative_extended_dims", "test_sce_NCd1d2d3_sum_weight_high_ii",
          "test_reduce_sum_keepdims_random", "test_gelu_tanh_2", "test_constantofshape_int_zeros",
          "test_sce_mean_weight_expanded", "test_layer_normalization_4d_axis1_expanded"]


def ort_run(model: bytes, inputs):
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})


@pytest.mark.parametrize("name", SAMPLE)
def test_node_model_round_trip_is_valid_and_equivalent(name):
    case = NODE_TESTS[name]
    exported = trainrt.reexport_onnx(case.model.SerializeToString())
    onnx.checker.check_model(onnx.load_from_string(exported), full_check=True)
    inputs = [np.asarray(x) for x in case.data_sets[0][0]]
    for before, after in zip(trainrt.Session(case.model.SerializeToString()).run(inputs),
                             trainrt.Session(exported).run(inputs)):
        np.testing.assert_array_equal(before, after)
    for ours, theirs in zip(trainrt.Session(exported).run(inputs), ort_run(exported, inputs)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_transformer_round_trip_matches_onnxruntime():
    model = transformer_model(layers=2, hidden=64, heads=4, vocab=512, seq=16)
    exported = trainrt.reexport_onnx(model)
    onnx.checker.check_model(onnx.load_from_string(exported), full_check=True)
    tokens = np.random.default_rng(0).integers(0, 512, (3, 16), dtype=np.int64)
    (ours,) = trainrt.Session(exported).run([tokens])
    (theirs,) = ort_run(model, [tokens])
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_truncated_model_bytes_are_invalid_model_errors():
    model = NODE_TESTS["test_add_bcast"].model.SerializeToString()
    for cut in range(1, len(model), max(1, len(model) // 40)):
        with pytest.raises(trainrt.Error):
            trainrt.Session(model[:cut]).run([])
