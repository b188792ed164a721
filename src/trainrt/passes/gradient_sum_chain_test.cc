// GradientSumChain: a Sum of four contributions, each made after a temporary of its own, becomes a
// chain summing each as it comes: the same bits, and the run holds fewer buffers at once.
#include "trainrt/passes/gradient_sum_chain.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::random_tensor;

// g = Sum(c0, c1, c2, c3), c_k = Op_k(Neg(x)): all four (64, 64) contributions alive at the Sum.
std::shared_ptr<Graph> four_contributions() {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({64, 64}));
  std::vector<Value*> parts;
  const char* ops[] = {"Sigmoid", "Abs", "Exp", "Tanh"};
  for (int k = 0; k < 4; ++k) {
    Value* t = g->add_node("Neg", {x}, {"t" + std::to_string(k)})->output(0);
    parts.push_back(g->add_node(ops[k], {t}, {"c" + std::to_string(k)})->output(0));
  }
  g->add_output(g->add_node("Sum", parts, {"x_grad_sum"})->output(0));
  infer_graph_shapes(*g);
  return g;
}

TEST(GradientSumChain, SumsEachContributionAsItComes) {
  auto g = four_contributions();
  ASSERT_TRUE(GradientSumChain().apply(*g));
  verify(*g);
  EXPECT_EQ(count(*g, "Sum"), 3);
  // Each partial sum runs right after the contribution it adds.
  std::vector<std::string> order;
  for (const Node* n : g->topological_order()) order.push_back(n->output(0)->name);
  EXPECT_EQ(order, (std::vector<std::string>{"t0", "c0", "t1", "c1", "x_grad_sum/partial", "t2", "c2",
                                             "x_grad_sum/partial_1", "t3", "c3", "x_grad_sum"}));
  const Tensor x = random_tensor({64, 64}, 3);
  Session original(four_contributions()), chained(g);
  expect_close(chained.run({x})[0], original.run({x})[0], 0.0, 0.0);
  // Three contributions and a temporary at once, against the running sum and a contribution.
  EXPECT_LT(chained.last_stats().arena_bytes, original.last_stats().arena_bytes);
}

TEST(GradientSumChain, LeavesTwoOperandAndBroadcastSumsAlone) {
  auto g = testing::graph_with_opsets();
  Value* a = g->add_input("a", DType::kF32, Shape({4, 3}));
  Value* b = g->add_input("b", DType::kF32, Shape({3}));
  g->add_output(g->add_node("Sum", {a, a}, {"two"})->output(0));
  g->add_output(g->add_node("Sum", {a, b, a}, {"broadcast"})->output(0));
  infer_graph_shapes(*g);
  EXPECT_FALSE(GradientSumChain().apply(*g));
}

}  // namespace
}  // namespace trainrt
