// Shape and type inference of the reduction family, with symbolic dims as at plan time.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

const Dim kBatch = Dim::symbolic("batch");
const Dim kSeq = Dim::symbolic("seq");

// One input of the node under test: a graph input of a type and shape, an initializer (its
// value known, as for constants at plan time), or omitted.
struct In {
  DType dtype = DType::kUndefined;
  Shape shape;
  Tensor value;
  static In of(DType t, Shape s) { return {t, std::move(s), {}}; }
  static In constant(Tensor v) { return {v.dtype(), Shape::of(v.dims()), v}; }
  static In omitted() { return {}; }
};

struct Out {
  DType dtype;
  Shape shape;
};

std::vector<Out> infer(const std::string& op, const std::vector<In>& inputs, int num_outputs = 1,
                       const std::map<std::string, Attribute>& attrs = {}, int opset = 18) {
  Graph g;
  g.set_opset("", opset);
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const In& in = inputs[i];
    const std::string name = "in" + std::to_string(i);
    values.push_back(in.value.defined()                ? g.add_initializer(name, in.value)
                     : in.dtype != DType::kUndefined ? g.add_input(name, in.dtype, in.shape)
                                                     : nullptr);
  }
  std::vector<std::string> names;
  for (int i = 0; i < num_outputs; ++i) names.push_back("out" + std::to_string(i));
  Node* node = g.add_node(op, values, names, kOnnxDomain, "n");
  for (const auto& [k, v] : attrs) node->set_attr(k, v);
  infer_graph_shapes(g);
  std::vector<Out> out;
  for (Value* v : node->outputs()) out.push_back({v->dtype, v->shape});
  return out;
}

std::string error_of(const std::string& op, const std::vector<In>& inputs, int num_outputs = 1,
                     const std::map<std::string, Attribute>& attrs = {}) {
  try {
    infer(op, inputs, num_outputs, attrs);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ReductionSchemas, ReduceWithConstantAxesKeepsSymbols) {
  const In x = In::of(DType::kF32, Shape{{kBatch, 3, kSeq}});
  const In axes = In::constant(Tensor::from_i64({-2}));
  Out y = infer("ReduceSum", {x, axes})[0];
  EXPECT_EQ(y.dtype, DType::kF32);
  EXPECT_EQ(y.shape, (Shape{{kBatch, 1, kSeq}}));
  y = infer("ReduceMax", {x, In::constant(Tensor::from_i64({0, 2}))}, 1, {{"keepdims", Attribute::of_int(0)}})[0];
  EXPECT_EQ(y.shape, (Shape{{3}}));
  // Empty axes: every axis, or none with noop_with_empty_axes.
  EXPECT_EQ(infer("ReduceMean", {x, In::constant(Tensor::from_i64({}))})[0].shape, (Shape{{1, 1, 1}}));
  EXPECT_EQ(infer("ReduceMean", {x}, 1, {{"keepdims", Attribute::of_int(0)}})[0].shape, Shape(std::vector<Dim>{}));
  EXPECT_EQ(infer("ReduceSum", {x, In::constant(Tensor::from_i64({}))}, 1,
                  {{"noop_with_empty_axes", Attribute::of_int(1)}})[0].shape,
            x.shape);
}

TEST(ReductionSchemas, ReduceAxesAttributeOfOldOpsets) {
  const In x = In::of(DType::kBF16, Shape{{kBatch, 4, 5}});
  const Out y = infer("ReduceLogSumExp", {x}, 1, {{"axes", Attribute::of_ints({1, -1})}}, 13)[0];
  EXPECT_EQ(y.dtype, DType::kBF16);
  EXPECT_EQ(y.shape, (Shape{{kBatch, 1, 1}}));
}

TEST(ReductionSchemas, ReduceWithAxesUnknownAtPlanTime) {
  const In x = In::of(DType::kF32, Shape{{kBatch, 1, 7}});
  const In axes = In::of(DType::kI64, Shape{{1}});  // a graph input: no value yet
  // keepdims=1: the rank is known, each dim stays or becomes 1.
  const Out kept = infer("ReduceSum", {x, axes})[0];
  ASSERT_TRUE(kept.shape.rank_known);
  ASSERT_EQ(kept.shape.rank(), 3);
  EXPECT_FALSE(kept.shape.dims[0].is_static());
  EXPECT_EQ(kept.shape.dims[1], Dim(1));
  EXPECT_FALSE(kept.shape.dims[2].is_static());
  EXPECT_FALSE(infer("ReduceSum", {x, axes}, 1, {{"keepdims", Attribute::of_int(0)}})[0].shape.rank_known);
  EXPECT_FALSE(infer("ReduceSum", {In::of(DType::kF32, Shape::unknown_rank())})[0].shape.rank_known);
}

TEST(ReductionSchemas, ReduceErrorsNameTheNode) {
  const In x = In::of(DType::kF32, Shape{{kBatch, 3}});
  std::string e = error_of("ReduceSum", {x, In::constant(Tensor::from_i64({2}))});
  EXPECT_NE(e.find("node 'n' (ReduceSum)"), std::string::npos) << e;
  EXPECT_NE(e.find("axis 2 is out of range"), std::string::npos) << e;
  EXPECT_NE(error_of("ReduceSum", {x, In::constant(Tensor::from_i64({1, -1}))}).find("repeated"), std::string::npos);
  EXPECT_NE(error_of("ReduceSum", {In::of(DType::kBool, Shape{{2}})}).find("bool"), std::string::npos);
  EXPECT_EQ(infer("ReduceMin", {In::of(DType::kBool, Shape{{2}})})[0].dtype, DType::kBool);
  e = error_of("ReduceSum", {x, In::constant(Tensor::from_i64({0}))}, 1, {{"axes", Attribute::of_ints({0})}});
  EXPECT_NE(e.find("both"), std::string::npos) << e;
}

TEST(ReductionSchemas, SoftmaxKeepsShapeAndChecksAxis) {
  const In x = In::of(DType::kF16, Shape{{kBatch, kSeq, 64}});
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const Out y = infer(op, {x}, 1, {{"axis", Attribute::of_int(1)}})[0];
    EXPECT_EQ(y.dtype, DType::kF16);
    EXPECT_EQ(y.shape, x.shape);
    EXPECT_NE(error_of(op, {x}, 1, {{"axis", Attribute::of_int(-4)}}).find("axis -4"), std::string::npos);
  }
  EXPECT_NE(error_of("Softmax", {In::of(DType::kI64, Shape{{3}})}).find("dtype"), std::string::npos);
}

TEST(ReductionSchemas, LayerNormalizationStatsShapeAndType) {
  const In x = In::of(DType::kBF16, Shape{{kBatch, kSeq, 768}});
  const In scale = In::of(DType::kBF16, Shape{{768}});
  const std::vector<Out> out = infer("LayerNormalization", {x, scale, scale}, 3);
  EXPECT_EQ(out[0].dtype, DType::kBF16);
  EXPECT_EQ(out[0].shape, x.shape);
  EXPECT_EQ(out[1].dtype, DType::kF32);  // stash_type 1
  EXPECT_EQ(out[1].shape, (Shape{{kBatch, kSeq, 1}}));
  EXPECT_EQ(out[2].shape, (Shape{{kBatch, kSeq, 1}}));
  const std::vector<Out> axis1 =
      infer("LayerNormalization", {x, In::of(DType::kBF16, Shape{{kSeq, 768}})}, 2, {{"axis", Attribute::of_int(1)}});
  EXPECT_EQ(axis1[1].shape, (Shape{{kBatch, 1, 1}}));
  // Only Y wanted; omitted bias.
  EXPECT_EQ(infer("LayerNormalization", {x, scale, In::omitted()})[0].shape, x.shape);
  const std::string e = error_of("LayerNormalization", {x, In::of(DType::kBF16, Shape{{512}})});
  EXPECT_NE(e.find("does not broadcast"), std::string::npos) << e;
  EXPECT_NE(error_of("LayerNormalization", {x, In::of(DType::kF32, Shape{{768}})}).find("dtype"), std::string::npos);
}

TEST(ReductionSchemas, LossShapesPerReduction) {
  const In scores = In::of(DType::kF32, Shape{{kBatch, 10, kSeq}});
  const In labels = In::of(DType::kI64, Shape{{kBatch, kSeq}});
  const In weights = In::of(DType::kF32, Shape{{10}});
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    const Out none = infer(op, {scores, labels, weights}, 1, {{"reduction", Attribute::of_string("none")}})[0];
    EXPECT_EQ(none.shape, (Shape{{kBatch, kSeq}})) << op;
    const Out mean = infer(op, {scores, labels})[0];
    EXPECT_EQ(mean.dtype, DType::kF32);
    EXPECT_EQ(mean.shape, Shape(std::vector<Dim>{})) << op;
  }
  const std::vector<Out> sce = infer("SoftmaxCrossEntropyLoss", {scores, labels}, 2);
  EXPECT_EQ(sce[1].shape, scores.shape);
  // Dims missing on one side come from the other.
  const Out merged = infer("NegativeLogLikelihoodLoss", {In::of(DType::kF32, Shape{{8, 10, 5}}),
                                                         In::of(DType::kI32, Shape{{kBatch, Dim()}})},
                           1, {{"reduction", Attribute::of_string("none")}})[0];
  EXPECT_EQ(merged.shape, (Shape{{8, 5}}));
}

TEST(ReductionSchemas, LossErrorsNameTheNode) {
  const In scores = In::of(DType::kF32, Shape{{4, 10}});
  std::string e = error_of("SoftmaxCrossEntropyLoss", {scores, In::of(DType::kI64, Shape{{4, 2}})});
  EXPECT_NE(e.find("node 'n' (SoftmaxCrossEntropyLoss)"), std::string::npos) << e;
  EXPECT_NE(e.find("labels"), std::string::npos) << e;
  e = error_of("NegativeLogLikelihoodLoss", {scores, In::of(DType::kI64, Shape{{4}}), In::of(DType::kF32, Shape{{9}})});
  EXPECT_NE(e.find("weights"), std::string::npos) << e;
  e = error_of("NegativeLogLikelihoodLoss", {scores, In::of(DType::kF32, Shape{{4}})});
  EXPECT_NE(e.find("dtype"), std::string::npos) << e;
  e = error_of("SoftmaxCrossEntropyLoss", {scores, In::of(DType::kI64, Shape{{4}})}, 1,
               {{"reduction", Attribute::of_string("avg")}});
  EXPECT_NE(e.find("reduction 'avg'"), std::string::npos) << e;
  e = error_of("SoftmaxCrossEntropyLoss", {In::of(DType::kF32, Shape{{4}}), In::of(DType::kI64, Shape{{4}})});
  EXPECT_NE(e.find("(N, C, d1, ..., dk)"), std::string::npos) << e;
}

}  // namespace
}  // namespace trainrt
