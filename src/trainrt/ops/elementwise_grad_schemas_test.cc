// Inference of the elementwise family's TrainRT-domain gradient ops and of FusedMatMul: symbolic
// dims, transposes, broadcast batch dims, and ShapeErrors naming the node.
#include <gtest/gtest.h>

#include <map>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

using Attrs = std::map<std::string, Attribute>;
struct In {
  DType dtype;
  Shape shape;
};

Dim sym(const char* name) { return Dim::symbolic(name); }

// Infers one TrainRT-domain node whose inputs are graph inputs and returns its output.
const Value& infer(Graph& g, const std::string& op, const std::vector<In>& inputs, const Attrs& attrs = {}) {
  g.set_opset(std::string(kTrainrtDomain), 1);
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "x";  // not "x" + to_string(i): GCC 12 gives a false -Wrestrict on that
    name += std::to_string(i);
    values.push_back(g.add_input(name, inputs[i].dtype, inputs[i].shape));
  }
  Node* node = g.add_node(op, values, {"y"}, kTrainrtDomain, "n");
  for (const auto& [name, a] : attrs) node->set_attr(name, a);
  infer_graph_shapes(g);
  return *node->output(0);
}

void expect_fails(const std::string& op, const std::vector<In>& inputs, const std::string& message,
                  const Attrs& attrs = {}) {
  Graph g;
  try {
    infer(g, op, inputs, attrs);
    ADD_FAILURE() << op << ": expected a ShapeError";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 'n'"), std::string::npos) << what;
    EXPECT_NE(what.find(message), std::string::npos) << what;
  }
}

TEST(ElementwiseGradSchemas, ActivationGradsKeepTheMoreKnownShape) {
  for (const char* op : {"ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad"}) {
    Graph g;
    const Value& y = infer(g, op, {{DType::kBF16, Shape{{Dim(), 4}}}, {DType::kBF16, Shape{{sym("batch"), 4}}}});
    EXPECT_EQ(y.dtype, DType::kBF16);
    EXPECT_EQ(to_string(y.shape), "(batch, 4)") << op;
  }
  expect_fails("ReluGrad", {{DType::kF32, Shape{{2, 4}}}, {DType::kF32, Shape{{2, 5}}}}, "must match");
  expect_fails("TanhGrad", {{DType::kF32, Shape{{4}}}, {DType::kF64, Shape{{4}}}}, "dtype f64");
  expect_fails("SigmoidGrad", {{DType::kI64, Shape{{4}}}, {DType::kI64, Shape{{4}}}}, "dtype i64");
  expect_fails("GeluGrad", {{DType::kF32, Shape{{4}}}, {DType::kF32, Shape{{4}}}}, "approximate",
               {{"approximate", Attribute::of_string("erf")}});
}

TEST(ElementwiseGradSchemas, FusedMatMulTransposesAndBroadcastsSymbolicDims) {
  const Attrs trans_a{{"transA", Attribute::of_int(1)}};
  const Attrs trans_b{{"transB", Attribute::of_int(1)}};
  {
    Graph g;  // dY (B, T, N) @ W^T, W (K, N)
    const Shape dy{{sym("B"), sym("T"), 32}};
    const Value& y = infer(g, "FusedMatMul", {{DType::kF32, dy}, {DType::kF32, Shape{{64, 32}}}}, trans_b);
    EXPECT_EQ(to_string(y.shape), "(B, T, 64)");
  }
  {
    Graph g;  // A^T (B, T, K)^T @ dY (B, T, N)
    const Value& y = infer(g, "FusedMatMul", {{DType::kF64, Shape{{sym("B"), sym("T"), 64}}},
                                              {DType::kF64, Shape{{sym("B"), sym("T"), 32}}}}, trans_a);
    EXPECT_EQ(y.dtype, DType::kF64);
    EXPECT_EQ(to_string(y.shape), "(B, 64, 32)");
  }
  {
    Graph g;  // broadcast batch dims (2, 1) and (3)
    const Value& y = infer(g, "FusedMatMul", {{DType::kF32, Shape{{2, 1, 4, 3}}}, {DType::kF32, Shape{{3, 5, 4}}}},
                           {{"transA", Attribute::of_int(1)}, {"transB", Attribute::of_int(1)}});
    EXPECT_EQ(to_string(y.shape), "(2, 3, 3, 5)");
  }
  {
    Graph g;
    EXPECT_FALSE(infer(g, "FusedMatMul", {{DType::kF32, Shape::unknown_rank()}, {DType::kF32, Shape{{3, 5}}}})
                     .shape.rank_known);
  }
  expect_fails("FusedMatMul", {{DType::kF32, Shape{{3, 4}}}, {DType::kF32, Shape{{3, 5}}}}, "inner dims differ");
  expect_fails("FusedMatMul", {{DType::kF32, Shape{{4}}}, {DType::kF32, Shape{{4, 5}}}}, "rank >= 2");
  expect_fails("FusedMatMul", {{DType::kF32, Shape{{2, 3, 4}}}, {DType::kF32, Shape{{3, 4, 5}}}}, "do not broadcast");
  expect_fails("FusedMatMul", {{DType::kF32, Shape{{3, 4}}}, {DType::kF64, Shape{{4, 5}}}}, "dtype f64");
}

}  // namespace
}  // namespace trainrt
