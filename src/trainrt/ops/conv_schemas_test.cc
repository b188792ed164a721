// Plan-time inference of Conv and ConvGrad: output dims for every padding mode, symbolic dims,
// and the errors for shapes that cannot be convolved.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

const Dim kBatch = Dim::symbolic("batch");

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

// One Conv (or ConvGrad) node over graph inputs of the given shapes; returns its outputs' shapes
// as text ("(batch, 8, 16, 16)"), or the ShapeError's message.
class ConvNode {
 public:
  ConvNode() {
    g_.set_opset("", 22);
    g_.set_opset(std::string(kTrainrtDomain), 1);
  }
  std::vector<std::string> infer(const std::string& op, const std::vector<Shape>& inputs,
                                 std::map<std::string, Attribute> attrs = {}, int num_outputs = 1,
                                 DType dtype = DType::kF32) {
    std::vector<Value*> values;
    for (const Shape& s : inputs) values.push_back(g_.add_input("x" + std::to_string(n_++), dtype, s));
    std::vector<std::string> names;
    for (int i = 0; i < num_outputs; ++i) names.push_back("y" + std::to_string(n_++));
    Node* node = g_.add_node(op, values, names, op == "Conv" ? kOnnxDomain : kTrainrtDomain, "n" + std::to_string(n_++));
    for (auto& [name, a] : attrs) node->set_attr(name, a);
    InferenceContext ctx(*node, stored_inputs(*node));
    std::vector<std::string> out;
    try {
      infer_node(OpRegistry::global().require(*node), ctx);
    } catch (const ShapeError& e) {
      return {e.what()};
    }
    for (const auto& o : ctx.outputs()) out.push_back(to_string(o.shape));
    return out;
  }
  std::string conv(const std::vector<Shape>& inputs, std::map<std::string, Attribute> attrs = {}) {
    return infer("Conv", inputs, std::move(attrs))[0];
  }

 private:
  Graph g_;
  int n_ = 0;
};

TEST(ConvSchema, OutputDimsForEveryPaddingMode) {
  ConvNode n;
  const Shape x({kBatch, 3, 7, 8}), w({6, 3, 4, 3});
  EXPECT_EQ(n.conv({x, w}), "(batch, 6, 4, 6)");
  EXPECT_EQ(n.conv({x, w, Shape({6})}, {{"pads", ints({1, 1, 2, 1})}, {"strides", ints({2, 1})}}), "(batch, 6, 4, 8)");
  EXPECT_EQ(n.conv({x, w}, {{"dilations", ints({2, 3})}}), "(batch, 6, 1, 2)");
  for (const char* same : {"SAME_UPPER", "SAME_LOWER"})
    EXPECT_EQ(n.conv({x, w}, {{"auto_pad", Attribute::of_string(same)}, {"strides", ints({2, 3})}}),
              "(batch, 6, 4, 3)");
  EXPECT_EQ(n.conv({x, w}, {{"auto_pad", Attribute::of_string("VALID")}, {"strides", ints({2, 2})}}), "(batch, 6, 2, 3)");
}

TEST(ConvSchema, OneAndThreeSpatialDimsGroupsAndSymbols) {
  ConvNode n;
  EXPECT_EQ(n.conv({Shape({2, 4, 11}), Shape({8, 2, 3})}, {{"group", Attribute::of_int(2)}, {"pads", ints({1, 1})}}),
            "(2, 8, 11)");
  EXPECT_EQ(n.conv({Shape({kBatch, 2, 5, 6, 4}), Shape({3, 2, 3, 2, 3})}, {{"strides", ints({1, 2, 1})}}),
            "(batch, 3, 3, 3, 2)");
  // Depthwise: group = C.
  EXPECT_EQ(n.conv({Shape({kBatch, 16, 8, 8}), Shape({16, 1, 3, 3})}, {{"group", Attribute::of_int(16)}}),
            "(batch, 16, 6, 6)");
  // A dynamic spatial dim gives a dynamic output dim; kernel_shape stands in for unknown kernel dims.
  EXPECT_EQ(n.conv({Shape({kBatch, 3, Dim(), 8}), Shape({6, 3, Dim(), Dim()})}, {{"kernel_shape", ints({3, 3})}}),
            "(batch, 6, ?, 6)");
  EXPECT_EQ(n.conv({Shape::unknown_rank(), Shape({6, 3, 3, 3})}), "(?, 6, ?, ?)");
}

TEST(ConvSchema, ErrorsNameTheInputAndShapes) {
  ConvNode n;
  const Shape x({kBatch, 4, 8, 8});
  EXPECT_NE(n.conv({x, Shape({6, 3, 3, 3})}).find("has 4 channels, but input 1 (W) of shape (6, 3, 3, 3) with group 1"),
            std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 2, 3, 3})}, {{"group", Attribute::of_int(4)}}).find("expects 8"), std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 1, 3, 3})}, {{"group", Attribute::of_int(4)}}).find("not a multiple of group 4"),
            std::string::npos);
  EXPECT_NE(n.conv({Shape({4, 8}), Shape({6, 4})}).find("expected rank 3, 4 or 5"), std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 3})}).find("input 1 (W) has shape (6, 4, 3), expected rank 4"), std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 3, 3}), Shape({5})}).find("input 2 (B) has shape (5), expected (M) = (6)"),
            std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 3, 3})}, {{"strides", ints({1})}}).find("strides has 1 values"), std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 3, 3})}, {{"auto_pad", Attribute::of_string("SAME")}}).find("auto_pad 'SAME'"),
            std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 9, 3})}).find("smaller than the dilated kernel"), std::string::npos);
  EXPECT_NE(n.conv({x, Shape({6, 4, 3, 3})}, {{"kernel_shape", ints({2, 2})}}).find("kernel_shape (2, 2)"),
            std::string::npos);
}

TEST(ConvGradSchema, GradientsTakeTheForwardShapes) {
  ConvNode n;
  const Shape x({kBatch, 4, 8, 8}), w({6, 2, 3, 3});
  const std::map<std::string, Attribute> attrs{{"group", Attribute::of_int(2)}, {"pads", ints({1, 1, 1, 1})}};
  EXPECT_EQ(n.infer("ConvGrad", {Shape({kBatch, 6, 8, 8}), x, w}, attrs, 3),
            (std::vector<std::string>{"(batch, 4, 8, 8)", "(6, 2, 3, 3)", "(6)"}));
  EXPECT_NE(n.infer("ConvGrad", {Shape({kBatch, 6, 6, 6}), x, w}, attrs, 3)[0].find("input 0 (dY) has shape"),
            std::string::npos);
}

}  // namespace
}  // namespace trainrt
