// Plan-time inference of PythonOp (outputs from output_dtypes / output_shapes, symbolic dims taken
// from the inputs' dims) and PythonOpGrad (dX dims from the Shape inputs), and their errors.
// Kernels: registered by the binding layer, tested end to end in tests/python/test_python_op.py.
#include <gtest/gtest.h>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

const Dim kBatch = Dim::symbolic("batch");

struct Inferred {
  std::vector<InferenceContext::Output> outputs;
};

Inferred infer(Graph& g, const std::string& op, const std::vector<Value*>& inputs, int outputs,
               const std::map<std::string, Attribute>& attrs) {
  static int made = 0;  // output names unique across the calls on one graph
  std::vector<std::string> names;
  for (int i = 0; i < outputs; ++i) names.push_back(fmt("y", made++));
  Node* node = g.add_node(op, inputs, names, kTrainrtDomain);
  for (const auto& [name, a] : attrs) node->set_attr(name, a);
  InferenceContext ctx(*node, stored_inputs(*node));
  infer_node(OpRegistry::global().require(*node), ctx);
  return {ctx.outputs()};
}

TEST(PythonOpSchemas, PythonOpOutputsFollowTheAttributesAndTheInputsDims) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape({kBatch, 6}));
  auto r = infer(g, "PythonOp", {x}, 3,
                 {{"output_dtypes", Attribute::of_ints({1, 7})},  // FLOAT, INT64
                  {"output_shapes", Attribute::of_strings({"i0.0,i0.1", "i0.0,2"})}});
  EXPECT_EQ(r.outputs[0].dtype, DType::kI64);  // the ctx handle
  EXPECT_EQ(to_string(r.outputs[0].shape), "()");
  EXPECT_EQ(r.outputs[1].dtype, DType::kF32);
  EXPECT_EQ(to_string(r.outputs[1].shape), "(batch, 6)");
  EXPECT_EQ(r.outputs[2].dtype, DType::kI64);
  EXPECT_EQ(to_string(r.outputs[2].shape), "(batch, 2)");
  auto scalar = infer(g, "PythonOp", {x}, 2, {{"output_dtypes", Attribute::of_ints({1})},
                                             {"output_shapes", Attribute::of_strings({""})}});
  EXPECT_EQ(to_string(scalar.outputs[1].shape), "()");
}

TEST(PythonOpSchemas, PythonOpRefusesShapesItCannotRead) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape({kBatch, 6}));
  auto with_shapes = [&](std::vector<std::string> shapes) {
    return infer(g, "PythonOp", {x}, 2, {{"output_dtypes", Attribute::of_ints({1})},
                                         {"output_shapes", Attribute::of_strings(std::move(shapes))}});
  };
  EXPECT_THROW(with_shapes({"i1.0"}), ShapeError);  // no input 1
  EXPECT_THROW(with_shapes({"i0.2"}), ShapeError);  // x has 2 dims
  EXPECT_THROW(with_shapes({"4,x"}), ShapeError);
  EXPECT_THROW(with_shapes({"4", "5"}), ShapeError);  // two shapes for one output
}

TEST(PythonOpSchemas, PythonOpGradTakesDxDimsFromTheShapeInputs) {
  Graph g;
  Value* ctx = g.add_input("ctx", DType::kI64, Shape(std::vector<Dim>{}));
  Value* dy = g.add_input("dy", DType::kF32, Shape({kBatch, 6}));
  Value* known = g.add_initializer("shape0", Tensor::from_i64({4, 6}));
  Value* symbolic = g.add_input("shape1", DType::kI64, Shape({2}));
  auto r = infer(g, "PythonOpGrad", {ctx, dy, known, symbolic}, 2,
                 {{"num_output_grads", Attribute::of_int(1)}, {"input_dtypes", Attribute::of_ints({1, 11})}});
  EXPECT_EQ(to_string(r.outputs[0].shape), "(4, 6)");
  EXPECT_EQ(r.outputs[1].dtype, DType::kF64);
  EXPECT_EQ(to_string(r.outputs[1].shape), "(?, ?)");
  EXPECT_THROW(infer(g, "PythonOpGrad", {ctx, dy, known, symbolic}, 2, {{"num_output_grads", Attribute::of_int(1)}}),
               ShapeError);  // no input_dtypes
}

TEST(PythonOpSchemas, NeitherIsFoldedNorRecomputed) {
  EXPECT_FALSE(OpRegistry::global().find(std::string(kTrainrtDomain), "PythonOp")->deterministic);
  EXPECT_FALSE(OpRegistry::global().find(std::string(kTrainrtDomain), "PythonOpGrad")->deterministic);
}

}  // namespace
}  // namespace trainrt
