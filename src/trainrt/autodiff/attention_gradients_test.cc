// The gradient of ScaledDotProductAttention against f64 finite differences: both outputs (O and
// logsumexp) weighted into the loss, over masks (float masks learned too), causal blocks, grouped
// heads, fully masked rows and dropout with a fixed seed.
#include <gtest/gtest.h>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/kernels/cpu/attention_blocks.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::random_f64;
using testing::WorstErrors;

const std::string kDomain(kTrainrtDomain);

NodeSpec attention(std::map<std::string, Attribute> attrs = {}, int outputs = 2) {
  return {.op = "ScaledDotProductAttention", .attrs = std::move(attrs), .num_outputs = outputs, .domain = kDomain};
}

Tensor bool_mask(std::vector<int64_t> dims, std::vector<bool> keep) {
  Tensor m = Tensor::empty(DType::kBool, std::move(dims));
  for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = keep[static_cast<size_t>(i) % keep.size()];
  return m;
}

TEST(AttentionGradients, QKVMatchFiniteDifferences) {
  WorstErrors worst;
  // (B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev)
  worst.check(attention(), {random_f64({1, 2, 5, 4}, 1), random_f64({1, 2, 7, 4}, 2), random_f64({1, 2, 7, 3}, 3)});
  worst.check(attention({{"scale", Attribute::of_float(0.75f)}}),
              {random_f64({2, 1, 3, 2}, 4), random_f64({2, 1, 4, 2}, 5), random_f64({2, 1, 4, 5}, 6)});
  // Grouped heads: 4 query heads over 2 key/value heads.
  worst.check(attention(), {random_f64({2, 4, 3, 3}, 7), random_f64({2, 2, 5, 3}, 8), random_f64({2, 2, 5, 2}, 9)});
}

// Lengths just past the kernels' row and column blocks.
TEST(AttentionGradients, CausalAcrossBlocksMatchesFiniteDifferences) {
  WorstErrors worst;
  const auto causal = attention({{"is_causal", Attribute::of_int(1)}});
  const int64_t l = kRowBlock + 6, s = kColBlock + 2;
  worst.check(causal, {random_f64({1, 1, l, 2}, 10), random_f64({1, 1, s, 2}, 11), random_f64({1, 1, s, 1}, 12)});
  worst.check(causal, {random_f64({1, 2, 6, 3}, 13), random_f64({1, 1, 4, 3}, 14), random_f64({1, 1, 4, 2}, 15)});
}

TEST(AttentionGradients, MaskedAndFullyMaskedRowsMatchFiniteDifferences) {
  WorstErrors worst;
  const Tensor q = random_f64({2, 2, 4, 3}, 16), k = random_f64({2, 2, 5, 3}, 17), v = random_f64({2, 2, 5, 2}, 18);
  worst.check(attention(), {q, k, v, random_f64({4, 5}, 19, -2, 2)}, {.wrt = {0, 1, 2}});
  worst.check(attention(), {q, k, v, random_f64({2, 1, 1, 5}, 20, -2, 2)}, {.wrt = {0, 1, 2}});
  worst.check(attention(), {q, k, v, bool_mask({2, 1, 4, 5}, {true, false, true, true, false, false, true})});
  // Row 1 of every head sees nothing: its output and every gradient through it are 0. Its
  // logsumexp is +inf, so the loss weighs O alone.
  std::vector<bool> keep(20, true);
  for (int j = 5; j < 10; ++j) keep[static_cast<size_t>(j)] = false;
  const Tensor mask = bool_mask({4, 5}, keep), weights = random_f64({2, 2, 4, 2}, 31);
  const auto make = [&] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    g->set_opset(kDomain, 1);
    std::vector<Value*> in;
    for (const Tensor* t : {&q, &k, &v})
      in.push_back(g->add_input("in" + std::to_string(in.size()), DType::kF64, Shape::of(t->dims())));
    in.push_back(g->add_initializer("mask", mask));
    Node* n = g->add_node("ScaledDotProductAttention", in, {"o", "lse"}, kDomain, "attention");
    Value* weighted = g->add_node("Mul", {n->output(0), g->add_initializer("w", weights)}, {"weighted"})->output(0);
    Node* loss = g->add_node("ReduceSum", {weighted}, {"loss"});
    loss->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(loss->output(0));
    return g;
  };
  worst.record("fully masked rows", testing::expect_graph_gradients_match(make, {q, k, v}, {0, 1, 2}));
}

// The dropout mask is fixed by the `seed` attribute, so finite differences see the same mask.
TEST(AttentionGradients, DropoutWithAFixedSeedMatchesFiniteDifferences) {
  WorstErrors worst;
  const auto dropped = attention({{"dropout_p", Attribute::of_float(0.25f)}, {"seed", Attribute::of_int(5)}}, 3);
  worst.check(dropped, {random_f64({1, 2, 6, 3}, 21), random_f64({1, 2, 9, 3}, 22), random_f64({1, 2, 9, 4}, 23)});
  const auto causal = attention(
      {{"dropout_p", Attribute::of_float(0.5f)}, {"seed", Attribute::of_int(9)}, {"is_causal", Attribute::of_int(1)}}, 3);
  worst.check(causal, {random_f64({1, 2, 5, 2}, 24), random_f64({1, 1, 5, 2}, 25), random_f64({1, 1, 5, 2}, 26)});
}

// A learned float mask (T5's relative position bias) gets dS summed over its broadcast axes.
TEST(AttentionGradients, FloatMaskMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor q = random_f64({2, 2, 4, 3}, 32), k = random_f64({2, 2, 5, 3}, 33), v = random_f64({2, 2, 5, 2}, 34);
  // (L, S), (B, 1, 1, S), (1, H, L, S) and the full (B, H, L, S).
  for (std::vector<int64_t> dims : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{2, 1, 1, 5},
                                    std::vector<int64_t>{1, 2, 4, 5}, std::vector<int64_t>{2, 2, 4, 5}})
    worst.check(attention(), {q, k, v, random_f64(dims, 35, -2, 2)});
  // Grouped heads and causal across blocks: a (S,) mask sums dS over every row, so a skipped block
  // whose dS were not 0 would show.
  const int64_t l = kRowBlock + 3, s = kColBlock + 2;
  worst.check(attention({{"is_causal", Attribute::of_int(1)}}),
              {random_f64({1, 2, l, 2}, 36), random_f64({1, 1, s, 2}, 37), random_f64({1, 1, s, 2}, 38),
               random_f64({s}, 39)});
  worst.check(attention({{"dropout_p", Attribute::of_float(0.25f)}, {"seed", Attribute::of_int(3)}}, 3),
              {q, k, v, random_f64({4, 5}, 40)});
  // Only the mask learns: dQ, dK and dV are not asked for.
  worst.check(attention(), {q, k, v, random_f64({4, 5}, 41)}, {.wrt = {3}});
}

}  // namespace
}  // namespace trainrt
