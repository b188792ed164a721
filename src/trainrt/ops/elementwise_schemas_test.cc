// Type and shape inference of the elementwise ops at plan time: symbolic dims broadcast
// symbolically, unknown ranks stay unknown, dtypes follow ONNX's type constraints, and errors
// are ShapeErrors naming the node, op and shapes.
#include <gtest/gtest.h>

#include <map>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

using Attrs = std::map<std::string, Attribute>;
struct In {
  DType dtype;
  Shape shape;
};

Dim sym(const char* name) { return Dim::symbolic(name); }

// Infers one node whose inputs are graph inputs (no values known) and returns its output.
const Value& infer(Graph& g, const std::string& op, const std::vector<In>& inputs, const Attrs& attrs = {},
                   int opset = 23) {
  g.set_opset("", opset);
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i)
    values.push_back(g.add_input("x" + std::to_string(i), inputs[i].dtype, inputs[i].shape));
  Node* node = g.add_node(op, values, {"y"}, kOnnxDomain, "n");
  for (const auto& [name, a] : attrs) node->set_attr(name, a);
  infer_graph_shapes(g);
  return *node->output(0);
}

TEST(ElementwiseSchemas, BinaryBroadcastsSymbolicDims) {
  {
    Graph g;
    const Value& y = infer(g, "Add", {{DType::kF32, Shape{{sym("batch"), 4}}}, {DType::kF32, Shape{{4}}}});
    EXPECT_EQ(y.dtype, DType::kF32);
    EXPECT_EQ(to_string(y.shape), "(batch, 4)");
  }
  {
    Graph g;
    const Value& y = infer(g, "Mul", {{DType::kBF16, Shape{{sym("batch"), 1}}}, {DType::kBF16, Shape{{1, sym("seq")}}}});
    EXPECT_EQ(to_string(y.shape), "(batch, seq)");
  }
  {
    Graph g;  // (B, T, C) * (B, T, 1)
    const Value& y = infer(g, "Div", {{DType::kF32, Shape{{sym("B"), sym("T"), 768}}}, {DType::kF32, Shape{{sym("B"), sym("T"), 1}}}});
    EXPECT_EQ(to_string(y.shape), "(B, T, 768)");
  }
  {
    Graph g;  // two different symbols give an unnamed dynamic dim
    const Value& y = infer(g, "Sub", {{DType::kF32, Shape{{sym("a"), 4}}}, {DType::kF32, Shape{{sym("b"), 4}}}});
    EXPECT_EQ(to_string(y.shape), "(?, 4)");
  }
  {
    Graph g;
    const Value& y = infer(g, "Add", {{DType::kF32, Shape::unknown_rank()}, {DType::kF32, Shape{{4}}}});
    EXPECT_FALSE(y.shape.rank_known);
  }
  {
    Graph g;  // scalar
    const Value& y = infer(g, "Pow", {{DType::kF32, Shape{{sym("n"), 3}}}, {DType::kI64, Shape{}}});
    EXPECT_EQ(y.dtype, DType::kF32);  // the base's type
    EXPECT_EQ(to_string(y.shape), "(n, 3)");
  }
}

TEST(ElementwiseSchemas, CompareLogicalWhereAndVariadic) {
  {
    Graph g;
    const Value& y = infer(g, "Less", {{DType::kI64, Shape{{sym("n")}}}, {DType::kI64, Shape{}}});
    EXPECT_EQ(y.dtype, DType::kBool);
    EXPECT_EQ(to_string(y.shape), "(n)");
  }
  {
    Graph g;
    const Value& y = infer(g, "And", {{DType::kBool, Shape{{2, 1}}}, {DType::kBool, Shape{{3}}}});
    EXPECT_EQ(to_string(y.shape), "(2, 3)");
  }
  {
    Graph g;  // the attention mask pattern: Where(mask (1, 1, T, T), scores (B, H, T, T), -inf)
    const Value& y = infer(g, "Where", {{DType::kBool, Shape{{1, 1, sym("T"), sym("T")}}},
                                        {DType::kF16, Shape{{sym("B"), 12, sym("T"), sym("T")}}},
                                        {DType::kF16, Shape{}}});
    EXPECT_EQ(y.dtype, DType::kF16);
    EXPECT_EQ(to_string(y.shape), "(B, 12, T, T)");
  }
  {
    Graph g;
    const Value& y = infer(g, "Sum", {{DType::kF32, Shape{{3}}}, {DType::kF32, Shape{{sym("b"), 1}}}, {DType::kF32, Shape{{1}}}});
    EXPECT_EQ(to_string(y.shape), "(b, 3)");
  }
}

TEST(ElementwiseSchemas, UnaryCastAndClip) {
  {
    Graph g;
    const Value& y = infer(g, "Gelu", {{DType::kF32, Shape{{sym("b"), sym("t"), 3072}}}}, {{"approximate", Attribute::of_string("tanh")}});
    EXPECT_EQ(y.dtype, DType::kF32);
    EXPECT_EQ(to_string(y.shape), "(b, t, 3072)");
  }
  {
    Graph g;
    const Value& y = infer(g, "Cast", {{DType::kF32, Shape{{sym("b"), 8}}}}, {{"to", Attribute::of_int(16)}});
    EXPECT_EQ(y.dtype, DType::kBF16);
    EXPECT_EQ(to_string(y.shape), "(b, 8)");
  }
  {
    Graph g;
    const Value& y = infer(g, "CastLike", {{DType::kF32, Shape{{2}}}, {DType::kI64, Shape{{0}}}});
    EXPECT_EQ(y.dtype, DType::kI64);
  }
  {
    Graph g;
    const Value& y = infer(g, "Clip", {{DType::kF32, Shape{{sym("n")}}}, {DType::kF32, Shape{}}, {DType::kF32, Shape{{1}}}});
    EXPECT_EQ(to_string(y.shape), "(n)");
  }
  {
    Graph g;
    const Value& y = infer(g, "Clip", {{DType::kF32, Shape{{4}}}}, {{"min", Attribute::of_float(0.f)}}, 6);
    EXPECT_EQ(to_string(y.shape), "(4)");
  }
}

// The ShapeError message of inferring op on inputs (empty when inference succeeds).
std::string error_of(const std::string& op, const std::vector<In>& inputs, const Attrs& attrs = {}, int opset = 23) {
  Graph g;
  try {
    infer(g, op, inputs, attrs, opset);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "";
}

TEST(ElementwiseSchemas, ErrorsNameNodeOpAndShapes) {
  const std::string m = error_of("Add", {{DType::kF32, Shape{{sym("batch"), 3}}}, {DType::kF32, Shape{{4}}}});
  EXPECT_NE(m.find("'n' (Add)"), std::string::npos) << m;
  EXPECT_NE(m.find("(batch, 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("(4)"), std::string::npos) << m;
  EXPECT_NE(error_of("Add", {{DType::kF32, Shape{{2}}}, {DType::kF64, Shape{{2}}}}).find("dtype f64"), std::string::npos);
  EXPECT_NE(error_of("Exp", {{DType::kI64, Shape{{2}}}}), "");
  EXPECT_NE(error_of("Add", {{DType::kBool, Shape{{2}}}, {DType::kBool, Shape{{2}}}}), "");
  EXPECT_NE(error_of("Or", {{DType::kF32, Shape{{2}}}, {DType::kF32, Shape{{2}}}}), "");
  EXPECT_NE(error_of("Where", {{DType::kF32, Shape{{2}}}, {DType::kF32, Shape{{2}}}, {DType::kF32, Shape{{2}}}}), "");
  EXPECT_NE(error_of("Where", {{DType::kBool, Shape{{2}}}, {DType::kF32, Shape{{2}}}, {DType::kI64, Shape{{2}}}}), "");
  EXPECT_NE(error_of("Sum", {{DType::kF32, Shape{{2}}}, {DType::kF32, Shape{{3}}}}), "");
  EXPECT_NE(error_of("Clip", {{DType::kF32, Shape{{2}}}, {DType::kF32, Shape{{2}}}}), "");  // min not a scalar
  EXPECT_NE(error_of("Clip", {{DType::kF32, Shape{{2}}}, {DType::kF32, Shape{}}}, {}, 6), "");  // inputs before 11
  EXPECT_NE(error_of("Gelu", {{DType::kF32, Shape{{2}}}}, {{"approximate", Attribute::of_string("x")}}), "");
  Graph g;
  EXPECT_THROW(infer(g, "Cast", {{DType::kF32, Shape{{2}}}}, {{"to", Attribute::of_int(8)}}), UnsupportedOp);  // STRING
  Graph g2;
  EXPECT_THROW(infer(g2, "Cast", {{DType::kF32, Shape{{2}}}}), InvalidModel);  // 'to' missing
}

TEST(ElementwiseSchemas, OldOpsetForms) {
  {
    Graph g;  // Cast-1 names the type
    const Value& y = infer(g, "Cast", {{DType::kF32, Shape{{2}}}}, {{"to", Attribute::of_string("FLOAT16")}}, 1);
    EXPECT_EQ(y.dtype, DType::kF16);
  }
  {
    Graph g;  // Mul-6, broadcast=1, axis=1: (N, C, H, W) * (C)
    const Value& y = infer(g, "Mul", {{DType::kF32, Shape{{sym("N"), 3, 8, 8}}}, {DType::kF32, Shape{{3}}}},
                           {{"broadcast", Attribute::of_int(1)}, {"axis", Attribute::of_int(1)}}, 6);
    EXPECT_EQ(to_string(y.shape), "(N, 3, 8, 8)");
  }
  EXPECT_NE(error_of("Mul", {{DType::kF32, Shape{{2, 3}}}, {DType::kF32, Shape{{3}}}},
                     {{"broadcast", Attribute::of_int(1)}, {"axis", Attribute::of_int(0)}}, 6),
            "");  // (3) at axis 0 meets dim 2
}

TEST(ElementwiseSchemas, InplacePairs) {
  const OpRegistry& r = OpRegistry::global();
  using Pairs = std::vector<std::pair<int, int>>;
  EXPECT_EQ(r.find("", "Relu")->inplace, (Pairs{{0, 0}}));
  EXPECT_EQ(r.find("", "Add")->inplace, (Pairs{{0, 0}, {1, 0}}));
  EXPECT_EQ(r.find("", "Sum")->inplace, (Pairs{{0, 0}, {1, 0}}));
  EXPECT_EQ(r.find("", "Where")->inplace, (Pairs{{1, 0}, {2, 0}}));
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Relu",
                         "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu", "Where", "Equal", "Less", "Greater", "Not",
                         "And", "Or", "Cast", "Clip", "Min", "Max", "Sum", "Identity", "LessOrEqual", "GreaterOrEqual",
                         "Xor", "Floor", "Ceil", "Sign", "Softplus", "HardSigmoid", "Elu", "Selu", "Mean", "CastLike",
                         "Sin", "Cos"})
    EXPECT_NE(r.find("", op), nullptr) << op;
}

}  // namespace
}  // namespace trainrt
