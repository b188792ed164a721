// recompute_subgraphs: the patterns found on a small transformer-like graph, what the default and
// the config recompute, the same gradient bits either way, and the config's errors.
#include "trainrt/plan/recompute_subgraphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "trainrt/core/testing.h"
#include "trainrt/train/module_programs.h"

namespace trainrt {
namespace {

using testing::make_tensor;

// r = x @ w0 (b, 8); y = LayerNorm(r); a = y @ w1; s = Softmax(a); loss = sum(Tanh(s)), with a
// symbolic batch b. The LayerNorm gradient reads r, w1's gradient reads y, the Softmax gradient
// reads s (and rule 3 recomputes Tanh(s) from it).
std::shared_ptr<Graph> block(Dim batch = Dim::symbolic("b")) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({batch, 4}));
  Value* w0 = g->add_input("w0", DType::kF32, Shape({4, 8}));
  Value* w1 = g->add_input("w1", DType::kF32, Shape({8, 8}));
  Value* scale = g->add_input("scale", DType::kF32, Shape({8}));
  Value* bias = g->add_input("bias", DType::kF32, Shape({8}));
  Value* r = g->add_node("MatMul", {x, w0}, {"r"}, kOnnxDomain, "mm0")->output(0);
  Node* ln = g->add_node("LayerNormalization", {r, scale, bias}, {"y"}, kOnnxDomain, "ln");
  ln->set_attr("axis", Attribute::of_int(-1));
  Value* a = g->add_node("MatMul", {ln->output(0), w1}, {"a"}, kOnnxDomain, "mm1")->output(0);
  Node* softmax = g->add_node("Softmax", {a}, {"s"}, kOnnxDomain, "softmax");
  softmax->set_attr("axis", Attribute::of_int(-1));
  Value* t = g->add_node("Tanh", {softmax->output(0)}, {"t"}, kOnnxDomain, "tanh")->output(0);
  Node* sum = g->add_node("ReduceSum", {t}, {"loss"}, kOnnxDomain, "sum");
  sum->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(sum->output(0));
  return g;
}

const std::vector<std::string> kWrt = {"bias", "scale", "w0", "w1"};

ModulePrograms programs(const std::string& config, bool optimize = true) {
  return ModulePrograms(block(), {"loss"}, kWrt, false, optimize, {.config = parse_memory_opt_config(config)});
}

bool saves(const ModulePrograms& p, const std::string& name) {
  const auto& outputs = p.forward_graph().outputs();
  return std::any_of(outputs.begin() + 1, outputs.end(), [&](const Value* v) { return v->name == name; });
}

const RecomputePattern* row(const ModulePrograms& p, const std::string& pattern) {
  for (const RecomputePattern& r : p.recompute_patterns())
    if (r.pattern == pattern) return &r;
  return nullptr;
}

std::vector<Tensor> gradients(ModulePrograms& p) {
  Tensor x = make_tensor<float>({3, 4}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 0.2f, 0.1f});
  std::vector<float> w0(32), w1(64), scale(8), bias(8);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.03f * static_cast<float>(static_cast<int>(i % 11) - 5);
  for (size_t i = 0; i < 8; ++i) scale[i] = 1.f + 0.1f * static_cast<float>(i), bias[i] = 0.02f * static_cast<float>(i);
  ForwardState state;
  p.forward({x, make_tensor<float>({4, 8}, w0), make_tensor<float>({8, 8}, w1), make_tensor<float>({8}, scale),
             make_tensor<float>({8}, bias)},
            state, 0);
  return p.backward(state, {make_tensor<float>({}, {1.f})});
}

void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].nbytes(), expected[i].nbytes()) << kWrt[i];
    EXPECT_EQ(std::memcmp(got[i].raw(), expected[i].raw(), got[i].nbytes()), 0) << kWrt[i];
  }
}

TEST(RecomputeSubgraphs, TheDefaultRecomputesTheCheapLayerNormAndReportsTheCostlyPatterns) {
  ModulePrograms p = programs("");
  EXPECT_FALSE(saves(p, "y"));  // LayerNorm(r) runs again in the backward, from r, which its gradient reads
  EXPECT_TRUE(saves(p, "r"));
  EXPECT_TRUE(saves(p, "s"));
  const RecomputePattern* ln = row(p, "LayerNormalization+");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->found, 1);
  EXPECT_EQ(ln->applied, 1);
  EXPECT_TRUE(ln->cheap);
  EXPECT_EQ(ln->freed, "(b, 8) f32");
  EXPECT_EQ(ln->freed_bytes, "32*b");
  const RecomputePattern* product = row(p, "MatMul+");  // r from x and w0: a GEMM, not by default
  ASSERT_NE(product, nullptr);
  EXPECT_FALSE(product->cheap);
  EXPECT_EQ(product->applied, 0);
  // s needs a = y @ w1 again, from y, saved when the patterns are found.
  const RecomputePattern* softmax = row(p, "MatMul+Softmax+");
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->applied, 0);
}

TEST(RecomputeSubgraphs, AnUnnamedDynamicDimStillComparesByLayout) {
  ModulePrograms p(block(Dim()), {"loss"}, kWrt, false, true, {});
  EXPECT_FALSE(saves(p, "y"));
  const RecomputePattern* ln = row(p, "LayerNormalization+");
  ASSERT_NE(ln, nullptr);
  EXPECT_TRUE(ln->cheap);
  EXPECT_EQ(ln->freed_bytes, "32*?");
}

TEST(RecomputeSubgraphs, TheConfigTurnsPatternsOnAndOffWithTheSameGradientBits) {
  ModulePrograms kept = programs("LayerNormalization+:0:-1");
  EXPECT_TRUE(saves(kept, "y"));
  EXPECT_EQ(row(kept, "LayerNormalization+")->applied, 0);
  EXPECT_EQ(row(kept, "LayerNormalization+")->config, "0:-1");
  // With y saved, s's subgraph is a @ w1 from y: products on request.
  ModulePrograms softmax = programs("LayerNormalization+:0:-1,MatMul+Softmax+:1:-1,MatMul+:1:-1");
  EXPECT_FALSE(saves(softmax, "s"));
  EXPECT_FALSE(saves(softmax, "r"));
  EXPECT_EQ(row(softmax, "MatMul+Softmax+")->applied, 1);
  // With y recomputed by default, the Softmax's subgraph reaches back through the LayerNorm to r.
  ModulePrograms extended = programs("MatMul+Softmax+:1:-1");
  EXPECT_FALSE(saves(extended, "s"));
  EXPECT_FALSE(saves(extended, "y"));
  EXPECT_EQ(row(extended, "MatMul+Softmax+")->applied, 1);
  // The LayerNorm is copied twice (the default's copy and the extension's): node names stay unique.
  std::set<std::string> names;
  for (const Node* n : extended.joint_graph().nodes()) EXPECT_TRUE(names.insert(n->name()).second) << n->name();
  ModulePrograms plain = programs("", /*optimize=*/false);  // no rule, no default recompute
  EXPECT_TRUE(saves(plain, "y"));
  EXPECT_EQ(row(plain, "LayerNormalization+")->applied, 0);
  ModulePrograms by_default = programs("");
  const std::vector<Tensor> expected = gradients(kept);
  expect_same_bits(gradients(by_default), expected);
  expect_same_bits(gradients(softmax), expected);
  expect_same_bits(gradients(extended), expected);
  expect_same_bits(gradients(plain), expected);
}

TEST(RecomputeSubgraphs, ACountLimitsTheOccurrencesAndAnUnknownPatternIsListed) {
  ModulePrograms none = programs("LayerNormalization+:1:0,Gelu+:1:-1");
  EXPECT_TRUE(saves(none, "y"));
  const RecomputePattern* gelu = row(none, "Gelu+");
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->found, 0);
}

TEST(RecomputeSubgraphs, AMalformedConfigItemIsRefusedByName) {
  const RecomputeConfig c = parse_memory_opt_config(" Gelu+:1:-1, LayerNormalization+:0:3 ,");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.at("Gelu+").on);
  EXPECT_EQ(c.at("LayerNormalization+").count, 3);
  for (const char* bad : {"Gelu+", "Gelu+:1", "Gelu+:3:-1", "Gelu+:1:x", "Gelu+:1:-2", ":1:-1"})
    EXPECT_THROW(parse_memory_opt_config(bad), InvalidModel) << bad;
  try {
    parse_memory_opt_config("Gelu+:2:-1");
    FAIL();
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("Gelu+:2:-1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TRAINRT_MEMORY_OPT_LEVEL=2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
