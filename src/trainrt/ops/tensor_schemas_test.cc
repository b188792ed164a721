// Plan-time inference of the shape and data movement ops: symbolic dims, values known only for
// constants, and the output values of Shape / Size / Constant. Run-time behaviour (concrete shapes)
// is covered by the kernel tests in kernels/cpu.
#include <gtest/gtest.h>

#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

const Dim kBatch = Dim::symbolic("batch");
const Dim kSeq = Dim::symbolic("seq");

// One node over a graph whose inputs are symbolic and whose constants are initializers.
class OneNode {
 public:
  explicit OneNode(int opset = 23) { g_.set_opset("", opset); }
  Value* input(DType t, Shape s) { return g_.add_input("x" + std::to_string(n_++), t, std::move(s)); }
  Value* constant(Tensor v) { return g_.add_initializer("c" + std::to_string(n_++), std::move(v)); }
  Value* ints(const std::vector<int64_t>& v) { return constant(Tensor::from_i64(v)); }

  // Infers `op` on the inputs; returns the outputs (dtype, shape, value).
  std::vector<InferenceContext::Output> infer(const std::string& op, const std::vector<Value*>& inputs,
                                              std::map<std::string, Attribute> attrs = {},
                                              int num_outputs = 1) {
    std::vector<std::string> names;
    for (int i = 0; i < num_outputs; ++i) names.push_back("y" + std::to_string(n_++));
    Node* node = g_.add_node(op, inputs, names, kOnnxDomain, "n" + std::to_string(n_++));
    for (auto& [name, a] : attrs) node->set_attr(name, a);
    InferenceContext ctx(*node, stored_inputs(*node));
    infer_node(OpRegistry::global().require(*node), ctx);
    return ctx.outputs();
  }
  // The inferred shape as text: "(batch, 6)", "?" for an unnamed dynamic dim, "(*)" for unknown rank.
  std::string shape_of(const std::string& op, const std::vector<Value*>& inputs,
                       std::map<std::string, Attribute> attrs = {}) {
    return to_string(infer(op, inputs, std::move(attrs))[0].shape);
  }

 private:
  Graph g_;
  int n_ = 0;
};

TEST(ReshapeSchema, ConstantShapeOnSymbolicInput) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 6}));
  EXPECT_EQ(n.shape_of("Reshape", {x, n.ints({-1, 3, 2})}), "(batch, 3, 2)");
  EXPECT_EQ(n.shape_of("Reshape", {x, n.ints({0, 2, 3})}), "(batch, 2, 3)");
  EXPECT_EQ(n.shape_of("Reshape", {x, n.ints({0, -1})}), "(batch, 6)");
  EXPECT_EQ(n.shape_of("Reshape", {x, n.ints({-1})}), "(?)");
  Value* xs = n.input(DType::kF32, Shape({kBatch, kSeq, 768}));
  EXPECT_EQ(n.shape_of("Reshape", {xs, n.ints({0, 0, 12, 64})}), "(batch, seq, 12, 64)");
  EXPECT_EQ(n.shape_of("Reshape", {xs, n.ints({0, -1, 768})}), "(batch, seq, 768)");
  Value* s = n.input(DType::kF32, Shape({4, 6}));
  EXPECT_EQ(n.shape_of("Reshape", {s, n.ints({-1, 8})}), "(3, 8)");
  EXPECT_THROW(n.shape_of("Reshape", {s, n.ints({5, -1})}), ShapeError);
  EXPECT_THROW(n.shape_of("Reshape", {s, n.ints({5, 5})}), ShapeError);
}

TEST(ReshapeSchema, UnknownShapeValueGivesRankFromItsLength) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 6}));
  Value* shape = n.input(DType::kI64, Shape({3}));
  EXPECT_EQ(n.shape_of("Reshape", {x, shape}), "(?, ?, ?)");
  Value* any = n.input(DType::kI64, Shape({Dim()}));
  EXPECT_EQ(n.shape_of("Reshape", {x, any}), "(*)");
  EXPECT_THROW(n.shape_of("Reshape", {x, n.input(DType::kF32, Shape({2}))}), ShapeError);
}

TEST(ReshapeSchema, ViewOpsAreInPlace) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout"}) {
    const OpSchema* s = OpRegistry::global().find("", op);
    ASSERT_NE(s, nullptr) << op;
    EXPECT_EQ(s->inplace, (std::vector<std::pair<int, int>>{{0, 0}})) << op;
  }
  EXPECT_FALSE(OpRegistry::global().find("", "Dropout")->deterministic);
  EXPECT_TRUE(OpRegistry::global().find("", "Reshape")->deterministic);
}

TEST(ShapeSchema, ValueOnlyWhenTheSelectedDimsAreStatic) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 6}));
  auto out = n.infer("Shape", {x});
  EXPECT_FALSE(out[0].value.defined());
  EXPECT_EQ(out[0].dtype, DType::kI64);
  EXPECT_EQ(to_string(out[0].shape), "(2)");
  out = n.infer("Shape", {x}, {{"start", Attribute::of_int(1)}});
  ASSERT_TRUE(out[0].value.defined());
  EXPECT_EQ(out[0].value.to_i64_vector(), (std::vector<int64_t>{6}));
  out = n.infer("Shape", {n.input(DType::kF16, Shape({2, 3, 4}))}, {{"end", Attribute::of_int(-1)}});
  ASSERT_TRUE(out[0].value.defined());
  EXPECT_EQ(out[0].value.to_i64_vector(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(to_string(out[0].shape), "(2)");
  EXPECT_EQ(n.shape_of("Shape", {n.input(DType::kF32, Shape::unknown_rank())}), "(?)");
}

TEST(SizeSchema, ValueWhenStatic) {
  OneNode n;
  auto out = n.infer("Size", {n.input(DType::kF32, Shape({3, 4}))});
  ASSERT_TRUE(out[0].value.defined());
  EXPECT_EQ(out[0].value.to_i64(0), 12);
  EXPECT_EQ(to_string(out[0].shape), "()");
  out = n.infer("Size", {n.input(DType::kF32, Shape({kBatch, 4}))});
  EXPECT_FALSE(out[0].value.defined());
  EXPECT_EQ(to_string(out[0].shape), "()");
}

TEST(SqueezeUnsqueezeSchema, SymbolicDimsAndNegativeAxes) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 1, 6}));
  EXPECT_EQ(n.shape_of("Squeeze", {x, n.ints({-2})}), "(batch, 6)");
  EXPECT_EQ(n.shape_of("Squeeze", {x, n.ints({0})}), "(1, 6)");  // a dynamic dim may be 1
  EXPECT_EQ(n.shape_of("Squeeze", {x}), "(*)");       // which dims go depends on batch
  EXPECT_THROW(n.shape_of("Squeeze", {x, n.ints({2})}), ShapeError);
  EXPECT_EQ(n.shape_of("Squeeze", {x, n.input(DType::kI64, Shape({1}))}), "(?, ?)");
  EXPECT_EQ(n.shape_of("Unsqueeze", {x, n.ints({0, -1})}), "(1, batch, 1, 6, 1)");
  EXPECT_EQ(n.shape_of("Unsqueeze", {x, n.input(DType::kI64, Shape({2}))}), "(?, ?, ?, ?, ?)");
  OneNode old(11);
  Value* y = old.input(DType::kF32, Shape({kBatch, 1}));
  EXPECT_EQ(old.shape_of("Squeeze", {y}, {{"axes", Attribute::of_ints({1})}}), "(batch)");
  EXPECT_EQ(old.shape_of("Unsqueeze", {y}, {{"axes", Attribute::of_ints({1})}}), "(batch, 1, 1)");
  EXPECT_THROW(old.shape_of("Unsqueeze", {y}), ShapeError);
}

TEST(FlattenTransposeSchema, SymbolicDims) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 3, 4}));
  EXPECT_EQ(n.shape_of("Flatten", {x}), "(batch, 12)");
  EXPECT_EQ(n.shape_of("Flatten", {x}, {{"axis", Attribute::of_int(0)}}), "(1, ?)");
  EXPECT_EQ(n.shape_of("Flatten", {x}, {{"axis", Attribute::of_int(-1)}}), "(?, 4)");
  EXPECT_EQ(n.shape_of("Flatten", {n.input(DType::kF32, Shape({kBatch, 0}))}), "(batch, 0)");
  Value* t = n.input(DType::kF32, Shape({kBatch, kSeq, 8}));
  EXPECT_EQ(n.shape_of("Transpose", {t}, {{"perm", Attribute::of_ints({1, 0, 2})}}), "(seq, batch, 8)");
  EXPECT_EQ(n.shape_of("Transpose", {t}), "(8, seq, batch)");
  EXPECT_THROW(n.shape_of("Transpose", {t}, {{"perm", Attribute::of_ints({0, 1})}}), ShapeError);
}

TEST(GatherSchema, EmbeddingLookup) {
  OneNode n;
  Value* table = n.input(DType::kF32, Shape({1000, 16}));
  Value* ids = n.input(DType::kI64, Shape({kBatch, kSeq}));
  EXPECT_EQ(n.shape_of("Gather", {table, ids}), "(batch, seq, 16)");
  EXPECT_EQ(n.shape_of("Gather", {table, ids}, {{"axis", Attribute::of_int(-1)}}), "(1000, batch, seq)");
  EXPECT_EQ(n.shape_of("Gather", {table, n.input(DType::kI32, Shape())}), "(16)");
  EXPECT_THROW(n.shape_of("Gather", {table, n.input(DType::kF32, Shape({2}))}), ShapeError);
}

TEST(ConcatSplitSchema, SymbolicDims) {
  OneNode n;
  Value* a = n.input(DType::kF32, Shape({kBatch, 3}));
  Value* b = n.input(DType::kF32, Shape({kBatch, 5}));
  EXPECT_EQ(n.shape_of("Concat", {a, b}, {{"axis", Attribute::of_int(-1)}}), "(batch, 8)");
  EXPECT_EQ(n.shape_of("Concat", {a, a}, {{"axis", Attribute::of_int(0)}}), "(?, 3)");
  EXPECT_THROW(n.shape_of("Concat", {a, b}, {{"axis", Attribute::of_int(0)}}), ShapeError);
  Value* x = n.input(DType::kF32, Shape({kBatch, 6}));
  std::map<std::string, Attribute> thirds{{"axis", Attribute::of_int(1)},
                                          {"num_outputs", Attribute::of_int(3)}};
  auto parts = n.infer("Split", {x}, thirds, 3);
  for (const auto& p : parts) EXPECT_EQ(to_string(p.shape), "(batch, 2)");
  parts = n.infer("Split", {x, n.ints({1, 5})}, {{"axis", Attribute::of_int(-1)}}, 2);
  EXPECT_EQ(to_string(parts[1].shape), "(batch, 5)");
  parts = n.infer("Split", {x, n.input(DType::kI64, Shape({2}))}, {{"axis", Attribute::of_int(1)}}, 2);
  EXPECT_EQ(to_string(parts[0].shape), "(batch, ?)");
  parts = n.infer("Split", {x}, {}, 2);  // along the symbolic axis
  EXPECT_EQ(to_string(parts[0].shape), "(?, 6)");
}

TEST(SliceSchema, ConstantAndUnknownBounds) {
  OneNode n;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Value* x = n.input(DType::kF32, Shape({kBatch, 10}));
  EXPECT_EQ(n.shape_of("Slice", {x, n.ints({2}), n.ints({8}), n.ints({1})}), "(batch, 6)");
  EXPECT_EQ(n.shape_of("Slice", {x, n.ints({0, 1}), n.ints({kMax, kMax})}), "(batch, 9)");
  EXPECT_EQ(n.shape_of("Slice", {x, n.ints({1}), n.ints({kMax})}), "(?, 10)");
  EXPECT_EQ(n.shape_of("Slice", {x, n.ints({-1}), n.ints({-kMax}), n.ints({-1}), n.ints({-1})}),
            "(batch, 10)");
  Value* unknown = n.input(DType::kI64, Shape({1}));
  EXPECT_EQ(n.shape_of("Slice", {x, unknown, unknown, n.ints({1})}), "(batch, ?)");
  EXPECT_EQ(n.shape_of("Slice", {x, unknown, unknown}), "(?, 10)");
  EXPECT_EQ(n.shape_of("Slice", {x, n.ints({0}), n.ints({1}), unknown}), "(?, ?)");
  EXPECT_THROW(n.shape_of("Slice", {x, n.ints({0}), n.ints({1}), n.ints({2})}), ShapeError);
  OneNode old(9);
  Value* y = old.input(DType::kF32, Shape({kBatch, 10}));
  std::map<std::string, Attribute> attrs{{"starts", Attribute::of_ints({-3})},
                                         {"ends", Attribute::of_ints({kMax})},
                                         {"axes", Attribute::of_ints({1})}};
  EXPECT_EQ(old.shape_of("Slice", {y}, attrs), "(batch, 3)");
}

TEST(ExpandTileSchema, SymbolicDims) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 1}));
  EXPECT_EQ(n.shape_of("Expand", {x, n.ints({1, 4})}), "(batch, 4)");
  EXPECT_EQ(n.shape_of("Expand", {x, n.ints({2, 1, 1})}), "(2, batch, 1)");
  EXPECT_EQ(n.shape_of("Expand", {x, n.input(DType::kI64, Shape({3}))}), "(?, ?, ?)");
  EXPECT_EQ(n.shape_of("Tile", {x, n.ints({1, 3})}), "(batch, 3)");
  EXPECT_EQ(n.shape_of("Tile", {x, n.ints({2, 3})}), "(?, 3)");
  EXPECT_EQ(n.shape_of("Tile", {x, n.input(DType::kI64, Shape({2}))}), "(?, ?)");
  EXPECT_THROW(n.shape_of("Tile", {x, n.ints({2})}), ShapeError);
}

TEST(SourceSchemas, ConstantConstantOfShapeRangeDropout) {
  OneNode n;
  auto c = n.infer("Constant", {}, {{"value_ints", Attribute::of_ints({1, 2, 3})}});
  ASSERT_TRUE(c[0].value.defined());
  EXPECT_EQ(to_string(c[0].shape), "(3)");
  EXPECT_EQ(c[0].dtype, DType::kI64);
  EXPECT_THROW(n.infer("Constant", {}, {{"value_string", Attribute::of_string("x")}}), UnsupportedOp);
  Tensor fill = Tensor::empty(DType::kI32, {1});
  EXPECT_EQ(n.infer("ConstantOfShape", {n.ints({2, 3})}, {{"value", Attribute::of_tensor(fill)}})[0].dtype,
            DType::kI32);
  EXPECT_EQ(n.shape_of("ConstantOfShape", {n.input(DType::kI64, Shape({3}))}), "(?, ?, ?)");
  Value* s = n.input(DType::kI64, Shape());
  EXPECT_EQ(n.shape_of("Range", {s, s, s}), "(?)");
  Value* start = n.constant(Tensor::scalar<float>(0.f));
  Value* limit = n.constant(Tensor::scalar<float>(1.f));
  Value* delta = n.constant(Tensor::scalar<float>(0.3f));
  EXPECT_EQ(n.shape_of("Range", {start, limit, delta}), "(4)");
  Value* x = n.input(DType::kF16, Shape({kBatch, 8}));
  auto d = n.infer("Dropout", {x}, {}, 2);
  EXPECT_EQ(to_string(d[0].shape), "(batch, 8)");
  EXPECT_EQ(d[1].dtype, DType::kBool);
  EXPECT_EQ(n.shape_of("Trilu", {x}), "(batch, 8)");
}

TEST(TensorSchemas, CumSumKeepsShapeAndDTypeAndChecksTheAxis) {
  OneNode n;
  Value* x = n.input(DType::kI64, Shape({kBatch, 8}));
  EXPECT_EQ(n.shape_of("CumSum", {x, n.constant(Tensor::scalar<int64_t>(-1))}), "(batch, 8)");
  EXPECT_EQ(n.infer("CumSum", {x, n.input(DType::kI32, Shape())})[0].dtype, DType::kI64);  // axis known at run time
  EXPECT_THROW(n.shape_of("CumSum", {x, n.constant(Tensor::scalar<int64_t>(2))}), ShapeError);
  EXPECT_THROW(n.shape_of("CumSum", {x, n.ints({0, 1})}), ShapeError);
  EXPECT_THROW(n.shape_of("CumSum", {x, n.input(DType::kF32, Shape())}), ShapeError);
  EXPECT_THROW(n.shape_of("CumSum", {n.input(DType::kBool, Shape({3})), n.ints({0})}), ShapeError);
}

TEST(TensorSchemas, ResizeKeepsSymbolicDimsItDoesNotResize) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 3, 4, 6}));
  auto scales = [&](std::vector<float> v) {
    return n.constant(testing::make_tensor<float>({static_cast<int64_t>(v.size())}, v));
  };
  auto str = [](const char* s) { return Attribute::of_string(s); };
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, scales({1, 1, 2, 1.5f})}), "(batch, 3, 8, 9)");
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, scales({1, 1, 0.6f, 0.5f})}), "(batch, 3, 2, 3)");  // floor(in * scale)
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, nullptr, n.ints({5, 7})}, {{"axes", Attribute::of_ints({2, 3})}}),
            "(batch, 3, 5, 7)");
  // keep_aspect_ratio_policy: one scale for both axes, min(8 / 4, 9 / 6) = 1.5.
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, nullptr, n.ints({8, 9})},
                       {{"axes", Attribute::of_ints({-2, -1})}, {"keep_aspect_ratio_policy", str("not_larger")}}),
            "(batch, 3, 6, 9)");
  // A resized batch is dynamic; scales known only at run time keep the rank.
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, scales({2, 1, 1, 1})}), "(?, 3, 4, 6)");
  EXPECT_EQ(n.shape_of("Resize", {x, nullptr, n.input(DType::kF32, Shape({4}))}), "(?, ?, ?, ?)");
  EXPECT_EQ(n.shape_of("Upsample", {x, scales({1, 1, 2, 2})}, {{"mode", str("linear")}}), "(batch, 3, 8, 12)");
  EXPECT_THROW(n.shape_of("Resize", {x, nullptr, scales({2, 2})}), ShapeError);  // one per axis
  EXPECT_THROW(n.shape_of("Resize", {x, nullptr, scales({1, 1, 2, 2}), n.ints({1, 3, 8, 12})}), ShapeError);
  EXPECT_THROW(n.shape_of("Resize", {x}), ShapeError);  // neither scales nor sizes
  EXPECT_THROW(n.shape_of("Resize", {x, nullptr, scales({1, 1, 2, 2})}, {{"mode", str("area")}}), UnsupportedOp);
  EXPECT_THROW(n.shape_of("Resize", {n.input(DType::kI64, Shape({1, 1, 2, 2})), nullptr, scales({1, 1, 2, 2})},
                          {{"mode", str("linear")}}),
               ShapeError);  // linear needs float data; nearest takes any dtype
  EXPECT_EQ(n.shape_of("Resize", {n.input(DType::kI64, Shape({1, 1, 2, 2})), nullptr, scales({1, 1, 2, 2})}),
            "(1, 1, 4, 4)");
}

TEST(EinsumSchema, SymbolicDimsFollowTheirLabels) {
  OneNode n;
  auto eq = [](const char* s) { return std::map<std::string, Attribute>{{"equation", Attribute::of_string(s)}}; };
  Value* q = n.input(DType::kF32, Shape({kBatch, 4, kSeq, 8}));
  Value* k = n.input(DType::kF32, Shape({kBatch, 4, kSeq, 8}));
  EXPECT_EQ(n.shape_of("Einsum", {q, k}, eq("bhqd,bhkd->bhqk")), "(batch, 4, seq, seq)");
  EXPECT_EQ(n.shape_of("Einsum", {q}, eq("...d->...")), "(batch, 4, seq)");
  EXPECT_EQ(n.shape_of("Einsum", {q, k}, eq("abcd,abcd")), "()");  // implicit: nothing used once
  // An ellipsis dim of 1 broadcasts against the other input's.
  Value* a = n.input(DType::kF32, Shape({1, kSeq, 3})), *b = n.input(DType::kF32, Shape({5, 3, 2}));
  EXPECT_EQ(n.shape_of("Einsum", {a, b}, eq("...ij,...jk->...ik")), "(5, seq, 2)");
  EXPECT_THROW(n.shape_of("Einsum", {a, b}, eq("ij,jk->ik")), InvalidModel);  // terms do not fit the ranks
  EXPECT_THROW(n.shape_of("Einsum", {b, n.input(DType::kF32, Shape({4, 3}))}, eq("ijk,lk->il")), ShapeError);  // k: 2, 3
}

TEST(TensorSchemas, NonZeroCountIsSymbolicUntilTheValuesAreKnown) {
  OneNode n;
  const auto out = n.infer("NonZero", {n.input(DType::kBool, Shape({kBatch, 5}))})[0];
  EXPECT_EQ(out.dtype, DType::kI64);
  ASSERT_EQ(out.shape.rank(), 2);
  EXPECT_EQ(out.shape.dims[0], Dim(2));
  EXPECT_FALSE(out.shape.dims[1].is_static());
  EXPECT_NE(out.shape.dims[1].symbol.find("nonzero_of("), std::string::npos);
  EXPECT_EQ(n.shape_of("NonZero", {n.ints({0, 3, 0, 7})}), "(1, 2)");
}

TEST(TensorSchemas, ErrorsNameTheNodeAndOp) {
  OneNode n;
  Value* x = n.input(DType::kF32, Shape({kBatch, 6}));
  try {
    n.shape_of("Reshape", {x, n.ints({-1, -1})});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("node '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(Reshape)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace trainrt
