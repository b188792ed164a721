"""Writes the seed corpus for fuzz/onnx_import_fuzz: small ONNX models made with onnx.helper, plus a
sample of the node test models that the onnx package generates.

    .venv/bin/python fuzz/make_corpus.py build/fuzz/seeds

Generated at run time so that no binary is committed.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.loader import load_model_tests

# One node test model in this many joins the seeds: enough op and attribute variety, few files.
NODE_TEST_STRIDE = 10


def mlp() -> onnx.ModelProto:
    """MatMul + Add + Relu with raw_data initializers, symbolic dims and value_info."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    b = numpy_helper.from_array(np.ones(3, dtype=np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["y"], name="relu"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[w, b],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def typed_fields() -> onnx.ModelProto:
    """Initializers in the typed fields (float_data, int32_data for f16/bool/int8, int64_data,
    double_data), an input with a default initializer, and attributes of every kind."""
    inits = [
        helper.make_tensor("f", TensorProto.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("h", TensorProto.FLOAT16, [2], np.array([1, 2], dtype=np.float16)),
        helper.make_tensor("bo", TensorProto.BOOL, [2], [True, False]),
        helper.make_tensor("i8", TensorProto.INT8, [2], [-1, 5]),
        helper.make_tensor("i64", TensorProto.INT64, [2], [1, -1]),
        helper.make_tensor("d", TensorProto.DOUBLE, [1], [0.5]),
        helper.make_tensor("scale", TensorProto.FLOAT, [1], [3.0]),
    ]
    node = helper.make_node(
        "Custom", ["x", "f", "h", "bo", "i8", "i64", "d", "scale"], ["y"], domain="com.example",
        name="custom", alpha=0.5, count=3, mode="fast", axes=[0, 1], weights=[0.25, 0.75],
        names=["a", "b"], value=helper.make_tensor("t", TensorProto.INT32, [2], [7, 8]))
    const = helper.make_node("Constant", [], ["c"], value_ints=[1, 2, 3])
    graph = helper.make_graph(
        [node, const], "typed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, None]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None]),
         helper.make_tensor_value_info("c", TensorProto.INT64, [3])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def with_functions() -> onnx.ModelProto:
    """A model-local function with an attribute reference, called twice from another function."""
    act = helper.make_node("LeakyRelu", ["u"], ["Y"])
    act.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    scaled = helper.make_function(
        "local", "Scaled", ["X", "B"], ["Y"],
        [helper.make_node("Constant", [], ["a"], value_float=2.0),
         helper.make_node("Mul", ["X", "a"], ["t"]),
         helper.make_node("Add", ["t", "B"], ["u"]),
         act],
        [helper.make_opsetid("", 17)], attributes=["alpha"])
    twice = helper.make_function(
        "local", "Twice", ["X"], ["Y"],
        [helper.make_node("Scaled", ["X", "X"], ["M"], domain="local", alpha=0.1),
         helper.make_node("Scaled", ["M", "X"], ["Y"], domain="local")],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["y"], domain="local", name="call")], "functions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, functions=[scaled, twice],
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    models = {"mlp": mlp(), "typed_fields": typed_fields(), "functions": with_functions()}
    for i, case in enumerate(load_model_tests(kind="node")):
        if case.model is not None and i % NODE_TEST_STRIDE == 0:
            models[case.name] = case.model
    for name, model in models.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(model.SerializeToString())
    print(f"wrote {len(models)} seeds to {out}")


if __name__ == "__main__":
    main()
