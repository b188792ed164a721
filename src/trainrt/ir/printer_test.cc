#include "trainrt/ir/printer.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"

namespace trainrt {
namespace {

TEST(Printer, Graph) {
  Graph g;
  g.name = "mlp";
  g.set_opset("", 17);
  g.set_opset("com.trainrt", 1);
  Value* x = g.add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), 784}});
  Value* scale = g.add_input("scale", DType::kF32, Shape{{1}});
  scale->data = testing::make_tensor<float>({1}, {0.5f});
  Value* w = g.add_initializer("w", Tensor::zeros(DType::kF32, {784, 10}));
  Value* axes = g.add_initializer("axes", Tensor::from_i64({1}));
  Node* mm = g.add_node("MatMul", {x, w}, {"y"}, kOnnxDomain, "mm1");
  mm->output(0)->dtype = DType::kF32;
  mm->output(0)->shape = Shape{{Dim::symbolic("batch"), 10}};
  Node* sm = g.add_node("Softmax", {mm->output(0)}, {"p"}, kOnnxDomain, "softmax");
  sm->set_attr("axis", Attribute::of_int(1));
  Node* split = g.add_node("Split", {sm->output(0), axes}, {"a", "b"}, kOnnxDomain, "split");
  split->set_attr("perm", Attribute::of_ints({0, 2}));
  split->set_attr("value", Attribute::of_tensor(testing::make_tensor<float>({2}, {1.5f, 2})));
  Node* gelu = g.add_node("BiasGelu", {split->output(0), nullptr, scale}, {"g", ""}, kTrainrtDomain, "gelu");
  g.add_output(gelu->output(0));
  g.add_output(split->output(1));
  EXPECT_EQ(print_graph(g),
            "graph 'mlp' (opsets: ai.onnx 17, com.trainrt 1)\n"
            "  input %x: f32(batch, 784)\n"
            "  input %scale: f32(1) (default [0.5])\n"
            "  initializer %w: f32(784, 10)\n"
            "  initializer %axes: i64(1) = [1]\n"
            "  %y: f32(batch, 10) = MatMul(%x, %w)  # mm1\n"
            "  %p: ?(*) = Softmax(%y) {axis=1}  # softmax\n"
            "  %a: ?(*), %b: ?(*) = Split(%p, %axes) {perm=[0, 2], value=f32(2) [1.5, 2]}  # split\n"
            "  %g: ?(*), _ = com.trainrt::BiasGelu(%a, _, %scale)  # gelu\n"
            "  output %g\n"
            "  output %b\n");
}

TEST(Printer, NodesInScheduleOrderAndBrokenGraphsStillPrint) {
  Graph g;
  Value* a = g.add_value("a");
  Value* b = g.add_value("b");
  g.add_node_with_outputs("Neg", {b}, {a}, kOnnxDomain, "second");
  Value* x = g.add_input("x", DType::kI64, Shape::unknown_rank());
  g.add_node_with_outputs("Abs", {x}, {b}, kOnnxDomain, "first");
  std::string text = print_graph(g);
  EXPECT_LT(text.find("# first"), text.find("# second"));
  // A cycle: printed in insertion order instead of throwing.
  Graph c;
  Value* p = c.add_value("p");
  Value* q = c.add_value("q");
  c.add_node_with_outputs("Relu", {p}, {q}, kOnnxDomain, "r1");
  c.add_node_with_outputs("Relu", {q}, {p}, kOnnxDomain, "r2");
  EXPECT_EQ(print_graph(c),
            "graph '' (opsets: )\n"
            "  %q: ?(*) = Relu(%p)  # r1\n"
            "  %p: ?(*) = Relu(%q)  # r2\n");
}

TEST(Printer, Types) {
  Value v;
  EXPECT_EQ(print_type(v), "?(*)");
  v.dtype = DType::kBF16;
  v.shape = Shape{{2, Dim()}};
  EXPECT_EQ(print_type(v), "bf16(2, ?)");
  v.shape = Shape{{}};
  EXPECT_EQ(print_type(v), "bf16()");
}

}  // namespace
}  // namespace trainrt
