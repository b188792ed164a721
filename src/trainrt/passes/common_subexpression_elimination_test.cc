// CommonSubexpressionElimination: the IR before and after on duplicate casts and a duplicated
// chain, the nodes it must leave alone, and the same numbers from the deduplicated graph.
#include "trainrt/passes/common_subexpression_elimination.h"

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

Node* cast(Graph& g, Value* x, DType to, const std::string& out) {
  Node* n = g.add_node("Cast", {x}, {out});
  n->set_attr("to", Attribute::of_int(dtype_to_onnx(to)));
  return n;
}

// x (3, 4) f32: a = Cast(x, f64), b = Cast(x, f64) (a duplicate), ea = Exp(a), eb = Exp(b) (a
// duplicate once b is merged), out = Sub(ea, eb) + Cast(x, i64) back to f64 (another attribute).
std::shared_ptr<Graph> duplicated_chain() {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({3, 4}));
  Value* a = cast(*g, x, DType::kF64, "a")->output(0);
  Value* b = cast(*g, x, DType::kF64, "b")->output(0);
  Value* ea = g->add_node("Exp", {a}, {"ea"})->output(0);
  Value* eb = g->add_node("Exp", {b}, {"eb"})->output(0);
  Value* d = g->add_node("Add", {ea, eb}, {"d"})->output(0);
  Value* xi = cast(*g, x, DType::kI64, "xi")->output(0);
  Value* xf = cast(*g, xi, DType::kF64, "xf")->output(0);
  g->add_output(g->add_node("Add", {d, xf}, {"out"})->output(0));
  infer_graph_shapes(*g);
  return g;
}

TEST(CommonSubexpressionElimination, MergesDuplicateCastsAndTheChainsBuiltOnThem) {
  auto g = duplicated_chain();
  EXPECT_TRUE(CommonSubexpressionElimination().apply(*g));
  verify(*g);
  EXPECT_EQ(count(*g, "Cast"), 3);  // to f64 once, to i64 and back (other attributes, other input)
  EXPECT_EQ(count(*g, "Exp"), 1);
  const Node* add = g->find_value("d")->producer;
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->input(0), add->input(1));  // Exp(a) read twice
  EXPECT_EQ(add->input(0)->name, "ea");
  EXPECT_FALSE(CommonSubexpressionElimination().apply(*g));  // nothing left

  const std::vector<Tensor> inputs = {random_tensor({3, 4}, 7)};
  expect_close(Session(g).run(inputs)[0], Session(duplicated_chain()).run(inputs)[0], 0, 0);  // bit for bit
}

TEST(CommonSubexpressionElimination, LeavesRandomOpsOtherAttributesAndGraphOutputsAlone) {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({8}));
  // Two Dropouts of x draw two masks: never one.
  Value* d1 = g->add_node("Dropout", {x}, {"d1"})->output(0);
  Value* d2 = g->add_node("Dropout", {x}, {"d2"})->output(0);
  // Softmax on other axes computes other things.
  Value* x2 = g->add_input("x2", DType::kF32, Shape({2, 4}));
  Node* s0 = g->add_node("Softmax", {x2}, {"s0"});
  s0->set_attr("axis", Attribute::of_int(0));
  Node* s1 = g->add_node("Softmax", {x2}, {"s1"});
  s1->set_attr("axis", Attribute::of_int(1));
  // Two graph outputs computed alike keep their names: the caller reads both.
  Value* r1 = g->add_node("Relu", {x}, {"r1"})->output(0);
  Value* r2 = g->add_node("Relu", {x}, {"r2"})->output(0);
  for (Value* v : {d1, d2, s0->output(0), s1->output(0), r1, r2}) g->add_output(v);
  infer_graph_shapes(*g);
  EXPECT_FALSE(CommonSubexpressionElimination().apply(*g));
  EXPECT_EQ(count(*g, "Dropout"), 2);
  EXPECT_EQ(count(*g, "Softmax"), 2);
  EXPECT_EQ(count(*g, "Relu"), 2);
}

TEST(CommonSubexpressionElimination, MergesEqualTensorAttributesOnly) {
  auto g = testing::graph_with_opsets();
  auto constant = [&](float v, const std::string& name) {
    Tensor t = Tensor::empty(DType::kF32, {2});
    t.data<float>()[0] = v, t.data<float>()[1] = 2.f;
    Node* n = g->add_node("Constant", {}, {name});
    n->set_attr("value", Attribute::of_tensor(t));
    return n->output(0);
  };
  Value* c1 = constant(1.f, "c1");
  Value* c2 = constant(1.f, "c2");  // the same bytes: one constant
  Value* c3 = constant(3.f, "c3");  // other bytes
  Value* s = g->add_node("Add", {c1, c2}, {"s"})->output(0);
  g->add_output(g->add_node("Add", {s, c3}, {"out"})->output(0));
  infer_graph_shapes(*g);
  EXPECT_TRUE(CommonSubexpressionElimination().apply(*g));
  EXPECT_EQ(count(*g, "Constant"), 2);
  Tensor out = Session(g).run({})[0];
  EXPECT_FLOAT_EQ(out.data<float>()[0], 5.f);
  EXPECT_FLOAT_EQ(out.data<float>()[1], 6.f);
}

}  // namespace
}  // namespace trainrt
