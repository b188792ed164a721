// infer_graph_shapes passes the values inference gives (Constant nodes, views of them) on to their
// readers: the exporters' Reshape to Concat(-1, Slice(Shape(x), -1, INT_MAX)) keeps its rank.
#include <gtest/gtest.h>

#include <limits>

#include "trainrt/ir/graph.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

Value* constant(Graph& g, const std::string& name, std::vector<int64_t> v) {
  Node* n = g.add_node("Constant", {}, {name});
  n->set_attr("value", Attribute::of_tensor(Tensor::from_i64(v)));
  return n->output(0);
}

TEST(InferGraphShapes, ConstantBoundsOfASliceReachItThroughTheGraph) {
  Graph g;
  g.set_opset("", 18);
  Value* x = g.add_input("x", DType::kF32, Shape({Dim::symbolic("b"), Dim::symbolic("t"), 4}));
  Value* shape = g.add_node("Shape", {x}, {"shape"})->output(0);
  Value* last = g.add_node("Slice", {shape, constant(g, "begin", {-1}),
                                     constant(g, "end", {std::numeric_limits<int64_t>::max()})}, {"last"})->output(0);
  Node* dims = g.add_node("Concat", {constant(g, "minus_one", {-1}), last}, {"dims"});
  dims->set_attr("axis", Attribute::of_int(0));
  Value* y = g.add_node("Reshape", {x, dims->output(0)}, {"y"})->output(0);
  g.add_output(y);
  infer_graph_shapes(g);
  EXPECT_EQ(last->shape, Shape({1}));
  ASSERT_TRUE(y->shape.rank_known);
  EXPECT_EQ(y->shape.rank(), 2u);
  EXPECT_FALSE(g.find_value("begin")->is_initializer());  // values are passed, not stored
}

// Hiera's export: ReduceMax(x, Reshape(Constant(axes), (1))) with keepdims=0; without the
// Reshape's value the output rank, and the MatMul gradient after it, were unknown.
TEST(InferGraphShapes, AViewOfAConstantKeepsItsValue) {
  Graph g;
  g.set_opset("", 18);
  Value* x = g.add_input("x", DType::kF32, Shape({Dim::symbolic("b"), 4, 6}));
  Value* axes = g.add_node("Reshape", {constant(g, "axis", {1}), constant(g, "one", {1})}, {"axes"})->output(0);
  Node* max = g.add_node("ReduceMax", {x, axes}, {"y"});
  max->set_attr("keepdims", Attribute::of_int(0));
  g.add_output(max->output(0));
  infer_graph_shapes(g);
  EXPECT_EQ(max->output(0)->shape, Shape({Dim::symbolic("b"), 6}));
}

}  // namespace
}  // namespace trainrt
