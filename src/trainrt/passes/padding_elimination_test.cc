// Padding elimination: the IR before and after on a one-layer attention model over token ids, the
// same loss and kept rows from it (zeros at the dropped ones), and the models it must leave whole.
#include "trainrt/passes/padding_elimination.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::make_tensor;
using testing::random_tensor;

const Dim kB = Dim::symbolic("b"), kS = Dim::symbolic("s"), kN = Dim::symbolic("b*s");

Value* op(Graph& g, const std::string& type, std::vector<Value*> inputs, const std::string& name, Shape declared,
          std::vector<std::pair<std::string, Attribute>> attrs = {}, std::string_view domain = kOnnxDomain) {
  Node* n = g.add_node(type, inputs, {name}, domain);
  for (auto& [k, a] : attrs) n->set_attr(k, a);
  n->output(0)->declared = std::move(declared);
  return n->output(0);
}

// ids, mask (b, s) -> Gather(table) (b, s, 4) -> LayerNorm -> MatMul(w) -> Unsqueeze (b, 1, s, 4)
// -> SDPA(mask) -> Squeeze (b, s, 4) + the LayerNorm's output = y, a model output; y -> Reshape
// (b*s, 4) -> SCE(labels, ignore -100) = loss. With `mean_over_tokens`, the loss reads y's mean
// over the sequence instead, which the dropped rows would change.
std::shared_ptr<Graph> attention_model(bool declared_dims = true, bool mean_over_tokens = false) {
  auto g = testing::graph_with_opsets();
  Value* ids = g->add_input("ids", DType::kI64, Shape({kB, kS}));
  Value* mask = g->add_input("mask", DType::kI64, Shape({kB, kS}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({kN}));
  Value* table = g->add_initializer("table", random_tensor({10, 4}, 1));
  Value* w = g->add_initializer("w", random_tensor({4, 4}, 2));
  Value* scale = g->add_initializer("scale", random_tensor({4}, 3));
  const Shape tokens({kB, kS, 4});
  Value* emb = op(*g, "Gather", {table, ids}, "emb", tokens);
  Value* ln = op(*g, "LayerNormalization", {emb, scale}, "ln", tokens);
  Value* q = op(*g, "MatMul", {ln, w}, "q", tokens);
  Value* one = g->add_initializer("one", Tensor::from_i64({1}));
  Value* qh = op(*g, "Unsqueeze", {q, one}, "qh", Shape({kB, 1, kS, 4}));
  Value* keep = op(*g, "Cast", {mask}, "keep", Shape({kB, kS}), {{"to", Attribute::of_int(9)}});
  Value* heads = op(*g, "Unsqueeze", {keep, g->add_initializer("axes12", Tensor::from_i64({1, 2}))}, "attn_mask",
                    Shape({kB, 1, 1, kS}));
  Value* att = op(*g, "ScaledDotProductAttention", {qh, qh, qh, heads}, "att", Shape({kB, 1, kS, 4}),
                  {{"is_causal", Attribute::of_int(0)}}, kTrainrtDomain);
  Value* out = op(*g, "Squeeze", {att, one}, "out", tokens);
  Value* y = op(*g, "Add", {out, ln}, "y", tokens);
  Value* scores = y;
  if (mean_over_tokens)
    scores = op(*g, "ReduceMean", {y, one}, "pooled", Shape({kB, 4}), {{"keepdims", Attribute::of_int(0)}});
  else
    scores = op(*g, "Reshape", {y, g->add_initializer("rows", Tensor::from_i64({-1, 4}))}, "scores", Shape({kN, 4}));
  Node* loss = g->add_node("SoftmaxCrossEntropyLoss", {scores, mean_over_tokens ? g->add_input("pooled_labels", DType::kI64, Shape({kB})) : labels},
                           {"loss"});
  loss->set_attr("ignore_index", Attribute::of_int(-100));
  g->add_output(loss->output(0));
  g->add_output(y);
  if (!declared_dims)
    for (Node* n : g->nodes())
      for (Value* v : n->outputs()) v->declared = Shape::unknown_rank();
  infer_graph_shapes(*g);
  return g;
}

// Batch 2 x 5: row 0 whole, row 1 with its last 3 tokens padding (labels -100 there, and one more).
std::vector<Tensor> inputs() {
  return {make_tensor<int64_t>({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 0}),
          make_tensor<int64_t>({2, 5}, {1, 1, 1, 1, 1, 1, 1, 0, 0, 0}),
          make_tensor<int64_t>({10}, {0, 1, -100, 3, 1, 2, 3, -100, -100, -100})};
}

TEST(PaddingElimination, RunsTheRowWiseOpsOnTheKeptTokensWithTheSameLossAndRows) {
  auto g = attention_model();
  const std::vector<Tensor> expected = Session(g).run(inputs());
  PaddingElimination pass;
  ASSERT_TRUE(pass.apply(*g)) << pass.last_reason();
  verify(*g);
  EXPECT_EQ(pass.last_reason(), "5 ops on the kept tokens");  // Gather, LayerNorm, MatMul, Squeeze's Add, Reshape
  EXPECT_EQ(count(*g, "ValidRows"), 1);
  // Padded back where attention needs the sequence and for the model output y.
  EXPECT_EQ(count(*g, "GatherGrad"), 2);
  for (const Node* n : g->nodes())
    if (n->op_type() == "MatMul") EXPECT_EQ(n->input(0)->producer->op_type(), "LayerNormalization");
  const std::vector<Tensor> got = Session(g).run(inputs());
  testing::expect_close(got[0], expected[0], 1e-6f);
  const float* y = got[1].data<float>();
  const float* e = expected[1].data<float>();
  for (int64_t t = 0; t < 10; ++t)
    for (int64_t f = 0; f < 4; ++f) {
      const bool kept = t < 7;  // the mask's ones
      EXPECT_NEAR(y[t * 4 + f], kept ? e[t * 4 + f] : 0.f, 1e-6f) << "token " << t;
    }
}

// Inference alone names no dim of a Reshape to (-1, 4): without capture's declared dims the loss's
// rows are not known to be the tokens, and the model stays whole.
TEST(PaddingElimination, WithoutDeclaredDimsStopsWhereInferenceLosesTheTokens) {
  auto g = attention_model(/*declared_dims=*/false);
  PaddingElimination pass;
  EXPECT_FALSE(pass.apply(*g));
  EXPECT_NE(pass.last_reason().find("(SoftmaxCrossEntropyLoss) reads the embeddings' values across tokens"),
            std::string::npos)
      << pass.last_reason();
}

TEST(PaddingElimination, NeedsTokenIds) {
  auto g = testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({kB, kS, 4}));
  g->add_output(g->add_node("Relu", {x}, {"y"})->output(0));
  infer_graph_shapes(*g);
  PaddingElimination pass;
  EXPECT_FALSE(pass.apply(*g));
  EXPECT_EQ(pass.last_reason(), "no embedding of token ids (B, S) with symbolic dims");
}

TEST(PaddingElimination, LeavesAnOpAcrossTokensAndNamesIt) {
  auto g = attention_model(true, /*mean_over_tokens=*/true);
  PaddingElimination pass;
  EXPECT_FALSE(pass.apply(*g));
  EXPECT_NE(pass.last_reason().find("(ReduceMean) reads the embeddings' values across tokens"), std::string::npos)
      << pass.last_reason();
}

}  // namespace
}  // namespace trainrt
