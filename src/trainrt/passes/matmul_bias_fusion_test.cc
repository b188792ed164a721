// MatMulBiasFusion: the IR before and after on the Linear pattern, the cases it must leave alone,
// and the same numbers from the fused graph as from the unfused one.
#include "trainrt/passes/matmul_bias_fusion.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::random_tensor;

struct LinearSpec {
  std::vector<int64_t> bias_dims = {5};
  bool bias_first = false;       // Add(bias, Y) instead of Add(Y, bias)
  bool product_is_output = false;  // Y is also a graph output
};

// z = Add(FusedMatMul(x, w, transB = 1), bias): x (2, 3, 4), w (5, 4) -> z (2, 3, 5), then Relu.
std::shared_ptr<Graph> linear_graph(const LinearSpec& spec = {}) {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3, 4}));
  Value* w = g->add_input("w", DType::kF32, Shape({5, 4}));
  Value* b = g->add_input("b", DType::kF32, Shape::of(spec.bias_dims));
  Node* mm = g->add_node("FusedMatMul", {x, w}, {"y"}, kTrainrtDomain, "linear");
  mm->set_attr("transB", Attribute::of_int(1));
  mm->set_attr("alpha", Attribute::of_float(0.5f));
  Value* y = mm->output(0);
  Value* z = g->add_node("Add", spec.bias_first ? std::vector<Value*>{b, y} : std::vector<Value*>{y, b}, {"z"})->output(0);
  g->add_output(g->add_node("Relu", {z}, {"out"})->output(0));
  if (spec.product_is_output) g->add_output(y);
  infer_graph_shapes(*g);  // the pass reads the dims of Y and the bias
  return g;
}

std::vector<Tensor> linear_inputs(const LinearSpec& spec = {}) {
  return {random_tensor({2, 3, 4}, 1), random_tensor({5, 4}, 2), random_tensor(spec.bias_dims, 3)};
}

TEST(MatMulBiasFusion, FoldsTheBiasAddIntoTheProductAndComputesTheSame) {
  for (bool bias_first : {false, true}) {
    LinearSpec spec{.bias_first = bias_first};
    auto fused = linear_graph(spec);
    EXPECT_TRUE(MatMulBiasFusion().apply(*fused));
    verify(*fused);
    EXPECT_EQ(count(*fused, "Add"), 0);
    ASSERT_EQ(count(*fused, "FusedMatMul"), 1);
    const Node* mm = fused->find_value("z")->producer;
    ASSERT_NE(mm, nullptr);
    EXPECT_EQ(mm->op_type(), "FusedMatMul");
    EXPECT_EQ(mm->name(), "linear");
    EXPECT_EQ(mm->input(2)->name, "b");
    EXPECT_EQ(mm->attr_int("transB", 0), 1);
    EXPECT_FLOAT_EQ(mm->attr_float("alpha", 1.f), 0.5f);
    const auto inputs = linear_inputs(spec);
    Tensor want = Session(linear_graph(spec)).run(inputs)[0];
    expect_close(Session(fused).run(inputs)[0], want, 1e-6, 1e-6);
  }
}

TEST(MatMulBiasFusion, LeavesOtherAddsAlone) {
  // The product read elsewhere (here: a graph output), a bias that broadcasts along the last dim,
  // and a bias of rank 2 all keep their Add.
  for (const LinearSpec& spec : {LinearSpec{.product_is_output = true}, LinearSpec{.bias_dims = {1}},
                                 LinearSpec{.bias_dims = {3, 5}}}) {
    auto g = linear_graph(spec);
    EXPECT_FALSE(MatMulBiasFusion().apply(*g));
    EXPECT_EQ(count(*g, "Add"), 1);
    EXPECT_EQ(count(*g, "FusedMatMul"), 1);
  }
}

TEST(MatMulBiasFusion, PipelineRunsItsPassesInOrder) {
  PassPipeline pipeline;
  pipeline.add(std::make_unique<MatMulBiasFusion>());
  auto g = linear_graph();
  EXPECT_TRUE(pipeline.run(*g));
  EXPECT_FALSE(pipeline.run(*g));  // nothing left to fold
}

}  // namespace
}  // namespace trainrt
