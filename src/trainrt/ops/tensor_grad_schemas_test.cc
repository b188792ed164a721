// Plan-time inference of the data movement family's gradient ops (SliceGrad, GatherGrad,
// DropoutGrad): dX's dims from a shape value when it is known, its rank from the shape's length
// when only that is, and the dtype and rank checks. Kernels: kernels/cpu/tensor_grad_kernels_test.cc.
#include <gtest/gtest.h>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

// Infers one TrainRT-domain node over graph inputs (unknown values) and initializers (known).
class GradNode {
 public:
  Value* input(DType t, Shape s) { return g_.add_input(fmt("x", n_++), t, std::move(s)); }
  Value* ints(const std::vector<int64_t>& v) {
    return g_.add_initializer(fmt("c", n_++), Tensor::from_i64(v));
  }

  InferenceContext::Output infer(const std::string& op, const std::vector<Value*>& inputs,
                                 std::map<std::string, Attribute> attrs = {}) {
    Node* node = g_.add_node(op, inputs, {fmt("y", n_++)}, kTrainrtDomain);
    for (auto& [name, a] : attrs) node->set_attr(name, a);
    InferenceContext ctx(*node, stored_inputs(*node));
    infer_node(OpRegistry::global().require(*node), ctx);
    return ctx.output(0);
  }

 private:
  Graph g_;
  int n_ = 0;
};

const Dim kBatch = Dim::symbolic("batch");

TEST(TensorGradSchemas, SliceGradTakesItsDimsFromTheShapeInput) {
  GradNode n;
  Value* dy = n.input(DType::kF32, Shape({kBatch, 2}));
  Value* s = n.ints({0});
  auto known = n.infer("SliceGrad", {dy, n.ints({4, 5}), s, n.ints({2})});
  EXPECT_EQ(known.dtype, DType::kF32);
  EXPECT_EQ(to_string(known.shape), "(4, 5)");
  Value* dims = n.input(DType::kI64, Shape({2}));  // Shape(X) of a symbolic X: only its length is known
  EXPECT_EQ(to_string(n.infer("SliceGrad", {dy, dims, s, s}).shape), "(?, ?)");
  EXPECT_THROW(n.infer("SliceGrad", {dy, n.ints({4, 5, 6}), s, s}), ShapeError);  // rank of dY differs
  EXPECT_THROW(n.infer("SliceGrad", {n.input(DType::kI64, Shape({2})), dims, s, s}), ShapeError);
}

TEST(TensorGradSchemas, GatherGradChecksAxisAndDyRank) {
  GradNode n;
  Value* indices = n.input(DType::kI64, Shape({kBatch, 3}));
  Value* dy = n.input(DType::kF64, Shape({kBatch, 3, 8}));
  auto out = n.infer("GatherGrad", {n.ints({50, 8}), indices, dy});
  EXPECT_EQ(out.dtype, DType::kF64);
  EXPECT_EQ(to_string(out.shape), "(50, 8)");
  EXPECT_THROW(n.infer("GatherGrad", {n.ints({50, 8}), indices, dy}, {{"axis", Attribute::of_int(2)}}), ShapeError);
  EXPECT_THROW(n.infer("GatherGrad", {n.ints({50, 8, 2}), indices, dy}), ShapeError);  // dY rank 3, expected 4
  EXPECT_THROW(n.infer("GatherGrad", {n.ints({50, 8}), n.input(DType::kF32, Shape({3})), dy}), ShapeError);
}

TEST(TensorGradSchemas, GatherElementsGradChecksAxisAndDyShape) {
  GradNode n;
  Value* indices = n.input(DType::kI64, Shape({kBatch, 3}));
  Value* dy = n.input(DType::kF32, Shape({kBatch, 3}));
  auto out = n.infer("GatherElementsGrad", {n.ints({7, 8}), indices, dy}, {{"axis", Attribute::of_int(-1)}});
  EXPECT_EQ(out.dtype, DType::kF32);
  EXPECT_EQ(to_string(out.shape), "(7, 8)");
  EXPECT_THROW(n.infer("GatherElementsGrad", {n.ints({7, 8}), indices, dy}, {{"axis", Attribute::of_int(2)}}),
               ShapeError);
  EXPECT_THROW(n.infer("GatherElementsGrad", {n.ints({7, 8, 2}), indices, dy}), ShapeError);  // rank 3 vs 2
  EXPECT_THROW(n.infer("GatherElementsGrad", {n.ints({7, 8}), indices, n.input(DType::kF32, Shape({kBatch, 4}))}),
               ShapeError);  // dY is not the indices' shape
}

TEST(TensorGradSchemas, GatherGradPaddingIdxMustNameARow) {
  GradNode n;
  Value* indices = n.input(DType::kI64, Shape({kBatch, 3}));
  Value* dy = n.input(DType::kF32, Shape({kBatch, 3, 8}));
  const auto padding = [](int64_t p) { return std::map<std::string, Attribute>{{"padding_idx", Attribute::of_int(p)}}; };
  EXPECT_EQ(to_string(n.infer("GatherGrad", {n.ints({50, 8}), indices, dy}, padding(49)).shape), "(50, 8)");
  EXPECT_THROW(n.infer("GatherGrad", {n.ints({50, 8}), indices, dy}, padding(50)), ShapeError);
  EXPECT_THROW(n.infer("GatherGrad", {n.ints({50, 8}), indices, dy}, padding(-1)), ShapeError);
}

// Embedding (TrainRT's rows-with-padding lookup) infers as Gather on axis 0 and checks padding_idx.
TEST(TensorGradSchemas, EmbeddingIsGatherOnRowsWithAPaddingRow) {
  GradNode n;
  Value* table = n.input(DType::kF32, Shape({1000, 16}));
  Value* ids = n.input(DType::kI64, Shape({kBatch, Dim::symbolic("seq")}));
  const auto padding = [](int64_t p) { return std::map<std::string, Attribute>{{"padding_idx", Attribute::of_int(p)}}; };
  auto out = n.infer("Embedding", {table, ids}, padding(0));
  EXPECT_EQ(out.dtype, DType::kF32);
  EXPECT_EQ(to_string(out.shape), "(batch, seq, 16)");
  EXPECT_THROW(n.infer("Embedding", {table, ids}, padding(1000)), ShapeError);
  EXPECT_THROW(n.infer("Embedding", {table, ids}, padding(-1)), ShapeError);
  EXPECT_THROW(n.infer("Embedding", {table, ids}), ShapeError);  // no padding_idx: that is Gather
  EXPECT_THROW(n.infer("Embedding", {table, n.input(DType::kF32, Shape({2}))}, padding(0)), ShapeError);
}

TEST(TensorGradSchemas, DropoutGradHasDyShapeAndNeedsABoolMask) {
  GradNode n;
  Value* dy = n.input(DType::kF32, Shape({kBatch, 4}));
  EXPECT_EQ(to_string(n.infer("DropoutGrad", {dy, n.input(DType::kBool, Shape({kBatch, 4}))}).shape), "(batch, 4)");
  EXPECT_THROW(n.infer("DropoutGrad", {dy, n.input(DType::kF32, Shape({kBatch, 4}))}), ShapeError);
  Value* small = n.input(DType::kF32, Shape({2, 4}));
  EXPECT_THROW(n.infer("DropoutGrad", {small, n.input(DType::kBool, Shape({2, 5}))}), ShapeError);
}

}  // namespace
}  // namespace trainrt
