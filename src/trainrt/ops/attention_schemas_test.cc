// Shape and type inference of ScaledDotProductAttention and its Grad, with symbolic B, L and S as
// at plan time, and the errors bad shapes give.
#include <gtest/gtest.h>

#include <string>

#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

const Dim kBatch = Dim::symbolic("batch");
const Dim kLen = Dim::symbolic("L");
const Dim kKvLen = Dim::symbolic("S");
const std::string kDomain(kTrainrtDomain);

struct In {
  DType dtype = DType::kUndefined;  // kUndefined: an omitted optional input
  Shape shape;
};

// Infers one node of `op` over graph inputs of the given types; returns its outputs' types.
std::vector<std::pair<DType, Shape>> infer(const std::string& op, const std::vector<In>& inputs, int num_outputs,
                                           const std::map<std::string, Attribute>& attrs = {}) {
  Graph g;
  g.set_opset("", 18);
  g.set_opset(kDomain, 1);
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i)
    values.push_back(inputs[i].dtype == DType::kUndefined
                         ? nullptr
                         : g.add_input("in" + std::to_string(i), inputs[i].dtype, inputs[i].shape));
  std::vector<std::string> names;
  for (int i = 0; i < num_outputs; ++i) names.push_back("out" + std::to_string(i));
  Node* node = g.add_node(op, values, names, kDomain, "attention");
  for (const auto& [k, v] : attrs) node->set_attr(k, v);
  infer_graph_shapes(g);
  std::vector<std::pair<DType, Shape>> out;
  for (Value* v : node->outputs()) out.emplace_back(v->dtype, v->shape);
  return out;
}

std::string error_of(const std::string& op, const std::vector<In>& inputs, int num_outputs,
                     const std::map<std::string, Attribute>& attrs = {}) {
  try {
    infer(op, inputs, num_outputs, attrs);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "no error";
}

In f32(std::vector<Dim> dims) { return {DType::kF32, Shape(std::move(dims))}; }

TEST(AttentionSchemas, OutputsFollowSymbolicBatchAndLengths) {
  const In q = f32({kBatch, 8, kLen, 64}), k = f32({kBatch, 2, kKvLen, 64}), v = f32({kBatch, 2, kKvLen, 32});
  const auto out = infer("ScaledDotProductAttention", {q, k, v, {DType::kBool, Shape({kBatch, 1, 1, kKvLen})}}, 3);
  EXPECT_EQ(to_string(out[0].second), to_string(Shape({kBatch, 8, kLen, 32})));
  EXPECT_EQ(out[0].first, DType::kF32);
  EXPECT_EQ(to_string(out[1].second), to_string(Shape({kBatch, 8, kLen})));
  EXPECT_EQ(out[2].first, DType::kI64);
  EXPECT_EQ(out[2].second.rank(), 0);
  // A static dim on one side and a symbolic one on the other: the static one wins.
  const auto mixed = infer("ScaledDotProductAttention", {f32({kBatch, 2, 5, 4}), f32({3, 2, 7, 4}), f32({kBatch, 2, 7, 4})}, 2);
  EXPECT_EQ(to_string(mixed[0].second), "(3, 2, 5, 4)");
  const In d_o = f32({kBatch, 8, kLen, 32}), lse = f32({kBatch, 8, kLen});
  const auto grads = infer("ScaledDotProductAttentionGrad", {d_o, q, k, v, d_o, lse}, 3);
  EXPECT_EQ(to_string(grads[0].second), to_string(q.shape));
  EXPECT_EQ(to_string(grads[1].second), to_string(k.shape));
  EXPECT_EQ(to_string(grads[2].second), to_string(v.shape));
}

// bf16 Q, K, V: O and the gradients of Q, K and V are bf16, logsumexp (and its gradient) f32, and
// dS takes the float mask's dtype: bf16 as autocast casts it, or f32.
TEST(AttentionSchemas, Bf16KeepsLogsumexpInF32AndDsInTheMasksDtype) {
  const auto bf16 = [](std::vector<Dim> dims) { return In{DType::kBF16, Shape(std::move(dims))}; };
  const In q = bf16({kBatch, 4, kLen, 16}), k = bf16({kBatch, 2, kKvLen, 16}), v = bf16({kBatch, 2, kKvLen, 16});
  const In lse = f32({kBatch, 4, kLen});
  for (const DType mask : {DType::kBF16, DType::kF32}) {
    const In m{mask, Shape({kLen, kKvLen})};
    const auto out = infer("ScaledDotProductAttention", {q, k, v, m}, 2);
    EXPECT_EQ(out[0].first, DType::kBF16);
    EXPECT_EQ(out[1].first, DType::kF32);
    const auto grads = infer("ScaledDotProductAttentionGrad", {q, q, k, v, q, lse, m, {}, lse}, 4);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(grads[static_cast<size_t>(i)].first, DType::kBF16);
    EXPECT_EQ(grads[3].first, mask);
  }
  std::string e = error_of("ScaledDotProductAttention", {q, k, v, {DType::kF64, Shape({kLen, kKvLen})}}, 2);
  EXPECT_NE(e.find("expected bool or bf16 like Q (or f32)"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttentionGrad", {q, q, k, v, q, bf16({kBatch, 4, kLen})}, 3);
  EXPECT_NE(e.find("input 5 (logsumexp) has dtype bf16, expected f32"), std::string::npos) << e;
}

TEST(AttentionSchemas, BadShapesNameTheInputsAndShapes) {
  const In q = f32({2, 4, 5, 8});
  std::string e = error_of("ScaledDotProductAttention", {q, f32({2, 3, 6, 8}), f32({2, 3, 6, 8})}, 2);
  EXPECT_NE(e.find("not a multiple"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3, 6, 8)"), std::string::npos) << e;
  EXPECT_NE(e.find("ScaledDotProductAttention"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {q, f32({2, 2, 6, 7}), f32({2, 2, 6, 8})}, 2);
  EXPECT_NE(e.find("head sizes of Q and K"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {q, f32({2, 2, 6, 8}), f32({2, 2, 5, 8})}, 2);
  EXPECT_NE(e.find("sequence dims of K and V"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {f32({4, 5, 8}), f32({2, 2, 6, 8}), f32({2, 2, 6, 8})}, 2);
  EXPECT_NE(e.find("expected (B, H, L, E)"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {q, f32({2, 2, 6, 8}), f32({2, 2, 6, 8}), {DType::kBool, Shape({5, 7})}}, 2);
  EXPECT_NE(e.find("does not broadcast to (B, H, L, S) = (2, 4, 5, 6)"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {q, f32({2, 2, 6, 8}), f32({2, 2, 6, 8}), {DType::kI64, Shape({5, 6})}}, 2);
  EXPECT_NE(e.find("expected bool or f32"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttention", {q, f32({2, 2, 6, 8}), f32({2, 2, 6, 8})}, 2,
               {{"dropout_p", Attribute::of_float(1.5f)}});
  EXPECT_NE(e.find("dropout_p"), std::string::npos) << e;
  e = error_of("ScaledDotProductAttentionGrad",
               {f32({2, 4, 5, 8}), q, f32({2, 2, 6, 8}), f32({2, 2, 6, 8}), f32({2, 4, 5, 8}), f32({2, 4, 6})}, 3);
  EXPECT_NE(e.find("input 5 (logsumexp)"), std::string::npos) << e;
}

}  // namespace
}  // namespace trainrt
