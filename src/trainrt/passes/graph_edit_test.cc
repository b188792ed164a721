// graph_edit's schedule helper: sink_to_first_reader moves what reads only inputs and weights to
// just before its first reader, and leaves graph outputs and nodes already there alone.
#include "trainrt/passes/graph_edit.h"

#include <gtest/gtest.h>

#include "trainrt/ir/verifier.h"
#include "trainrt/passes/pass_testing.h"

namespace trainrt {
namespace {

std::vector<std::string> order_of(const Graph& g) {
  std::vector<std::string> names;
  for (const Node* n : g.topological_order()) names.push_back(n->output(0)->name);
  return names;
}

// h = Relu(Relu(x)); y = MatMul(h, Cast(w)); z = Cast(v), a graph output; the casts added first,
// as autocast's weight casts are.
TEST(GraphEdit, SinkToFirstReaderMovesWeightOnlyNodesToWhereTheyAreRead) {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3}));
  Value* w = g->add_initializer("w", Tensor::zeros(DType::kF32, {3, 4}));
  Value* v = g->add_initializer("v", Tensor::zeros(DType::kF32, {4}));
  Node* cast_w = g->add_node("Cast", {w}, {"w16"});
  cast_w->set_attr("to", Attribute::of_int(16));
  Node* cast_v = g->add_node("Cast", {v}, {"z"});
  cast_v->set_attr("to", Attribute::of_int(16));
  g->add_output(cast_v->output(0));
  Node* cast_x = g->add_node("Cast", {x}, {"x16"});
  cast_x->set_attr("to", Attribute::of_int(16));
  Value* h = g->add_node("Relu", {g->add_node("Relu", {cast_x->output(0)}, {"r1"})->output(0)}, {"h"})->output(0);
  g->add_output(g->add_node("MatMul", {h, cast_w->output(0)}, {"y"})->output(0));
  EXPECT_EQ(order_of(*g), (std::vector<std::string>{"w16", "z", "x16", "r1", "h", "y"}));
  EXPECT_EQ(sink_to_first_reader(*g), 1);  // x16 is read next already; z is handed over
  verify(*g);
  EXPECT_EQ(order_of(*g), (std::vector<std::string>{"z", "x16", "r1", "h", "w16", "y"}));
  EXPECT_EQ(sink_to_first_reader(*g), 0);
}

}  // namespace
}  // namespace trainrt
