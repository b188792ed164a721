// WeightGradientsEarly: a weight gradient's product, with the recompute that only it reads, runs
// before the input gradient made ahead of it: the same bits, and the recompute and the input
// gradient are no longer live together.
#include "trainrt/passes/weight_gradients_early.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

// dx = MatMul(dy, w); xr = Sigmoid(a) (the recompute); w_grad = Gemm(xr^T, dy); t = MatMul(dx, w).
// `recompute_read_elsewhere`: t + xr instead, so xr is not w_grad's alone.
std::shared_ptr<Graph> input_then_weight_gradient(bool recompute_read_elsewhere) {
  auto g = testing::graph_with_opsets();
  Value* dy = g->add_input("dy", DType::kF32, Shape({64, 64}));
  Value* a = g->add_input("a", DType::kF32, Shape({64, 64}));
  Value* w = g->add_input("w", DType::kF32, Shape({64, 64}));
  Value* dx = g->add_node("MatMul", {dy, w}, {"dx"})->output(0);
  Value* xr = g->add_node("Sigmoid", {a}, {"xr"})->output(0);
  Node* gemm = g->add_node("Gemm", {xr, dy}, {"w_grad"});
  gemm->set_attr("transA", Attribute::of_int(1));
  g->add_output(gemm->output(0));
  Value* next = g->add_node("MatMul", {dx, w}, {"t"})->output(0);
  if (recompute_read_elsewhere) next = g->add_node("Add", {next, xr}, {"t_plus"})->output(0);
  g->add_output(next);
  infer_graph_shapes(*g);
  return g;
}

std::vector<std::string> order_of(const Graph& g) {
  std::vector<std::string> order;
  for (const Node* n : g.topological_order()) order.push_back(n->output(0)->name);
  return order;
}

TEST(WeightGradientsEarly, TheWeightGradientAndItsRecomputeGoFirst) {
  auto g = input_then_weight_gradient(false);
  ASSERT_TRUE(WeightGradientsEarly().apply(*g));
  verify(*g);
  EXPECT_EQ(order_of(*g), (std::vector<std::string>{"xr", "w_grad", "dx", "t"}));
  const std::vector<Tensor> in = {random_tensor({64, 64}, 1), random_tensor({64, 64}, 2), random_tensor({64, 64}, 3)};
  Session original(input_then_weight_gradient(false)), moved(g);
  const std::vector<Tensor> want = original.run(in), got = moved.run(in);
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], 0.0, 0.0);
  // dx and xr (16 KiB each) were live together; now xr is dead before dx is made.
  EXPECT_EQ(original.last_stats().arena_bytes, 2u * 64 * 64 * sizeof(float));
  EXPECT_EQ(moved.last_stats().arena_bytes, 64u * 64 * sizeof(float));
}

TEST(WeightGradientsEarly, ARecomputeReadElsewhereAndOtherProductsKeepTheirPlace) {
  auto g = input_then_weight_gradient(true);
  EXPECT_FALSE(WeightGradientsEarly().apply(*g)) << "w_grad waits for xr, which stays after dx";
  EXPECT_EQ(order_of(*g), (std::vector<std::string>{"dx", "xr", "w_grad", "t", "t_plus"}));
  // A product whose output is summed with another part is not a finished gradient: it stays.
  auto h = testing::graph_with_opsets();
  Value* x = h->add_input("x", DType::kF32, Shape({8, 8}));
  Value* y = h->add_node("Neg", {x}, {"y"})->output(0);
  Value* z = h->add_node("Sigmoid", {x}, {"z"})->output(0);
  Value* p = h->add_node("MatMul", {z, x}, {"p"})->output(0);
  h->add_output(h->add_node("Sum", {p, y}, {"g"})->output(0));
  infer_graph_shapes(*h);
  EXPECT_FALSE(WeightGradientsEarly().apply(*h));
}

}  // namespace
}  // namespace trainrt
