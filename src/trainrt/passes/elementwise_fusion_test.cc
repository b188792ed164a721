// ElementwiseFusion before/after IR. The numbers the fused graph computes are checked against the
// unfused graph in kernels/codegen/fused_elementwise_kernel_test.cc (they need the kernel).
#include "trainrt/passes/elementwise_fusion.h"

#include <gtest/gtest.h>

#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"

namespace trainrt {
namespace {

using testing::count;
using testing::graph_with_opsets;

std::vector<bool> accept_all(const std::vector<const Graph*>& bodies) { return std::vector<bool>(bodies.size(), true); }

const Shape kTokens{{Dim::symbolic("batch"), Dim::symbolic("seq"), Dim(8)}};  // (batch, seq, 8)

Value* op(Graph& g, const std::string& type, std::vector<Value*> in, std::string_view domain = kOnnxDomain) {
  return g.add_node(type, in, {g.unique_name(type)}, domain)->output(0);
}

const Graph& body_of(const Graph& g) {
  for (const Node* n : g.nodes())
    if (n->op_type() == "FusedElementwise") return *n->attr("body")->g;
  throw std::runtime_error("no FusedElementwise node");
}

// RMSNorm's scale and the residual: x * r, then w * that, then + x; r (batch, seq, 1) and w (8)
// broadcast. One node with inputs x, r, w; the two products exist no more.
TEST(ElementwiseFusion, AChainWithBroadcastInputsBecomesOneNode) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* r = g->add_input("r", DType::kF32, Shape{{Dim::symbolic("batch"), Dim::symbolic("seq"), Dim(1)}});
  Value* w = g->add_input("w", DType::kF32, Shape({8}));
  Value* y = op(*g, "Add", {op(*g, "Mul", {w, op(*g, "Mul", {x, r})}), x});
  g->add_output(y);
  infer_graph_shapes(*g);

  ASSERT_TRUE(ElementwiseFusion(accept_all).apply(*g));
  EXPECT_EQ(g->num_nodes(), 1);
  const Node* fused = g->nodes()[0];
  EXPECT_EQ(fused->op_type(), "FusedElementwise");
  EXPECT_EQ(fused->domain(), kTrainrtDomain);
  EXPECT_EQ(fused->inputs(), (std::vector<Value*>{x, r, w}));
  EXPECT_EQ(fused->output(0), y);
  EXPECT_EQ(g->outputs()[0], y);
  EXPECT_EQ(count(body_of(*g), "Mul"), 2);
  EXPECT_EQ(count(body_of(*g), "Add"), 1);
}

// The norm's statistics (batch, seq, 1) never join the (batch, seq, 8) group: their dims differ.
// Sqrt and Reciprocal form a group of their own; the scale forms another.
TEST(ElementwiseFusion, SmallerOutputsStartTheirOwnGroup) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* var = g->add_input("var", DType::kF32, Shape{{Dim::symbolic("batch"), Dim::symbolic("seq"), Dim(1)}});
  Value* inv = op(*g, "Reciprocal", {op(*g, "Sqrt", {var})});
  g->add_output(op(*g, "Neg", {op(*g, "Mul", {x, inv})}));
  infer_graph_shapes(*g);

  ASSERT_TRUE(ElementwiseFusion(accept_all).apply(*g));
  EXPECT_EQ(count(*g, "FusedElementwise"), 2);
  EXPECT_EQ(g->num_nodes(), 2);
}

// A value read outside the group stays a value: the fused node outputs it as well.
TEST(ElementwiseFusion, AValueReadOutsideIsAnOutputOfTheFusedNode) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* e = op(*g, "Exp", {x});
  Value* y = op(*g, "Mul", {e, x});
  Value* axes = g->add_initializer("axes", Tensor::from_i64({2}));
  g->add_output(y);
  g->add_output(op(*g, "ReduceSum", {e, axes}));
  infer_graph_shapes(*g);

  ASSERT_TRUE(ElementwiseFusion(accept_all).apply(*g));
  ASSERT_EQ(count(*g, "FusedElementwise"), 1);
  const Node* fused = e->producer;
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->op_type(), "FusedElementwise");
  EXPECT_EQ(fused->outputs(), (std::vector<Value*>{e, y}));
}

// a = Exp(x); s = Softmax(a); y = Add(a, s): Add may not join Exp's group, since s depends on that
// group (the fused node would feed itself). Nothing has two fusible nodes, so nothing changes.
TEST(ElementwiseFusion, NeverMakesACycle) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* a = op(*g, "Exp", {x});
  Value* s = op(*g, "Softmax", {a});
  g->add_output(op(*g, "Add", {a, s}));
  infer_graph_shapes(*g);

  EXPECT_FALSE(ElementwiseFusion(accept_all).apply(*g));
  EXPECT_EQ(g->num_nodes(), 3);
  EXPECT_NO_THROW(g->topological_order());
}

// Groups whose body the callback refuses (its kernel did not compile) keep their ops.
TEST(ElementwiseFusion, RefusedGroupsStayUnfused) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  g->add_output(op(*g, "Sigmoid", {op(*g, "Neg", {x})}));
  infer_graph_shapes(*g);
  int asked = 0;
  ElementwiseFusion refuse([&](const std::vector<const Graph*>& bodies) {
    asked += static_cast<int>(bodies.size());
    return std::vector<bool>(bodies.size(), false);
  });
  EXPECT_FALSE(refuse.apply(*g));
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(g->num_nodes(), 2);
}

// Dropout (random), f16 values and a Pow with a computed exponent never join a group; an eps
// constant moves into the body, where it is no input.
TEST(ElementwiseFusion, FusesOnlyWhatItCanWriteAndMovesScalarConstantsIn) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* h = g->add_input("h", DType::kF16, kTokens);
  Value* eps = g->add_initializer("eps", Tensor::scalar<float>(1e-6f));
  Value* two = g->add_initializer("two", Tensor::scalar<float>(2.f));
  Value* d = op(*g, "Dropout", {op(*g, "Relu", {x})});
  Value* p = op(*g, "Pow", {op(*g, "Add", {x, eps}), two});  // Add + Pow: one group, eps and 2 inside
  Value* q = op(*g, "Pow", {x, op(*g, "Neg", {x})});          // a computed exponent: not fusible
  Value* b = op(*g, "Neg", {op(*g, "Abs", {h})});              // f16: not fusible
  for (Value* v : {d, p, q, b}) g->add_output(v);
  infer_graph_shapes(*g);

  ASSERT_TRUE(ElementwiseFusion(accept_all).apply(*g));
  EXPECT_EQ(count(*g, "FusedElementwise"), 1);
  EXPECT_EQ(count(*g, "Dropout"), 1);
  EXPECT_EQ(count(*g, "Pow"), 1);
  const Node* fused = p->producer;
  EXPECT_EQ(fused->inputs(), (std::vector<Value*>{x}));
  EXPECT_EQ(body_of(*g).initializers().size(), 2u);
}

// A reader of a value named to the pass (an output gradient that may be zeros) stays unfused.
TEST(ElementwiseFusion, LeavesTheReadersOfNamedValues) {
  auto g = graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, kTokens);
  Value* dy = g->add_input("dy", DType::kF32, kTokens);
  g->add_output(op(*g, "Sigmoid", {op(*g, "Mul", {op(*g, "Neg", {x}), dy})}));  // Neg, Sigmoid: alone
  g->add_output(op(*g, "Tanh", {op(*g, "Exp", {x})}));                           // one group
  infer_graph_shapes(*g);
  ASSERT_TRUE(ElementwiseFusion(accept_all, {"dy"}).apply(*g));
  EXPECT_EQ(count(*g, "Mul"), 1);
  EXPECT_EQ(count(*g, "FusedElementwise"), 1);
  EXPECT_EQ(g->num_nodes(), 4);
}

}  // namespace
}  // namespace trainrt
