// ScatterAccumulation: the IR before and after on a tied embedding's gradient, the same bits from
// the rewritten graph, the arena it no longer needs, and the Sums it must leave alone.
#include "trainrt/passes/scatter_accumulation.h"

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

constexpr int64_t kTokens = 6, kVocab = 40, kDim = 8;

// A tied embedding's gradient: dw = Sum(head_dw, scatter) (kVocab, kDim), where head_dw =
// dlogits^T h (the LM head's weight gradient) and scatter = GatherGrad(ids, demb) (the lookup's).
// `extra` adds a third contribution, a graph input, at position `extra_at` of the Sum.
std::shared_ptr<Graph> tied_gradient(bool extra = false, int extra_at = 0) {
  auto g = testing::graph_with_opsets();
  Value* h = g->add_input("h", DType::kF32, Shape({kTokens, kDim}));
  Value* dlogits = g->add_input("dlogits", DType::kF32, Shape({kTokens, kVocab}));
  Value* ids = g->add_input("ids", DType::kI64, Shape({kTokens}));
  Value* demb = g->add_input("demb", DType::kF32, Shape({kTokens, kDim}));
  Node* gemm = g->add_node("Gemm", {dlogits, h}, {"head_dw"});
  gemm->set_attr("transA", Attribute::of_int(1));
  Value* shape = g->add_initializer("shape", Tensor::from_i64({kVocab, kDim}));
  Value* scatter = g->add_node("GatherGrad", {shape, ids, demb}, {"scatter"}, kTrainrtDomain)->output(0);
  std::vector<Value*> parts = {gemm->output(0), scatter};
  if (extra) parts.insert(parts.begin() + extra_at, g->add_input("other", DType::kF32, Shape({kVocab, kDim})));
  g->add_output(g->add_node("Sum", parts, {"dw"})->output(0));
  infer_graph_shapes(*g);
  return g;
}

std::vector<Tensor> feeds(bool extra = false) {
  std::vector<Tensor> t = {random_tensor({kTokens, kDim}, 1), random_tensor({kTokens, kVocab}, 2),
                           testing::make_tensor<int64_t>({kTokens}, {3, 7, 3, 39, 0, 7}),
                           random_tensor({kTokens, kDim}, 3)};
  if (extra) t.push_back(random_tensor({kVocab, kDim}, 4));
  return t;
}

TEST(ScatterAccumulation, TheScatterAddsOntoTheHeadsGradientInPlace) {
  auto g = tied_gradient();
  ASSERT_TRUE(ScatterAccumulation().apply(*g));
  verify(*g);
  EXPECT_EQ(count(*g, "Sum"), 0);
  ASSERT_EQ(count(*g, "GatherGrad"), 1);
  const Node* dw = g->outputs()[0]->producer;
  EXPECT_EQ(g->outputs()[0]->name, "dw");
  EXPECT_EQ(dw->op_type(), "GatherGrad");
  ASSERT_EQ(dw->num_inputs(), 4);
  EXPECT_EQ(dw->input(3)->name, "head_dw");
  // Bit for bit what the Sum gave. The head's gradient is made in the output's storage either
  // way (the Sum, or the scatter, writes over it); only the original holds the dense scatter.
  Session original(tied_gradient()), rewritten(g);
  expect_close(rewritten.run(feeds())[0], original.run(feeds())[0], 0.0, 0.0);
  const size_t table = kVocab * kDim * sizeof(float);
  EXPECT_GE(original.last_stats().arena_bytes, table);
  EXPECT_LT(rewritten.last_stats().arena_bytes, table);
  EXPECT_EQ(rewritten.last_stats().num_over_outputs, 1);
}

TEST(ScatterAccumulation, OtherContributionsAreSummedFirstWhenTheScatterComesLast) {
  auto g = tied_gradient(/*extra=*/true, /*extra_at=*/0);  // Sum(other, head_dw, scatter)
  ASSERT_TRUE(ScatterAccumulation().apply(*g));
  verify(*g);
  const Node* dw = g->outputs()[0]->producer;
  ASSERT_EQ(dw->op_type(), "GatherGrad");
  EXPECT_EQ(dw->input(3)->producer->op_type(), "Sum");
  expect_close(Session(g).run(feeds(true))[0], Session(tied_gradient(true, 0)).run(feeds(true))[0], 0.0, 0.0);
}

TEST(ScatterAccumulation, LeavesSumsItCannotRewriteExactly) {
  // The scatter in the middle of three: (head + scatter) + other is not head + other + scatter.
  auto middle = tied_gradient(/*extra=*/true, /*extra_at=*/2);
  EXPECT_FALSE(ScatterAccumulation().apply(*middle));
  // The scatter read by something else too.
  auto shared = tied_gradient();
  shared->add_output(shared->find_value("scatter"));
  EXPECT_FALSE(ScatterAccumulation().apply(*shared));
  // A broadcast Add: the other operand is not the scatter's shape.
  auto g = testing::graph_with_opsets();
  Value* ids = g->add_input("ids", DType::kI64, Shape({kTokens}));
  Value* demb = g->add_input("demb", DType::kF32, Shape({kTokens, kDim}));
  Value* bias = g->add_input("bias", DType::kF32, Shape({kDim}));
  Value* shape = g->add_initializer("shape", Tensor::from_i64({kVocab, kDim}));
  Value* scatter = g->add_node("GatherGrad", {shape, ids, demb}, {"scatter"}, kTrainrtDomain)->output(0);
  g->add_output(g->add_node("Add", {bias, scatter}, {"sum"})->output(0));
  infer_graph_shapes(*g);
  EXPECT_FALSE(ScatterAccumulation().apply(*g));
}

}  // namespace
}  // namespace trainrt
