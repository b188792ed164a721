// layer_recompute: what each memory level saves and recomputes on two repeated layers, and the same
// gradients as the plain programs, bit for bit.
#include "trainrt/plan/layer_recompute.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "trainrt/core/testing.h"
#include "trainrt/train/module_programs.h"

namespace trainrt {
namespace {

using testing::make_tensor;

// Layer k (k = 1, 2): a_k = h_{k-1} @ w_k, t_k = Tanh(a_k), h_k = Tanh(t_k); h_0 = x; then a head
// y = h_2 @ w3 and loss = sum(y). The Tanh gradients read t_k and h_k; the next product's weight
// gradient reads h_k too.
std::shared_ptr<Graph> two_layers() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* h = g->add_input("x", DType::kF32, Shape({4, 3}));
  std::vector<Value*> w;
  for (int k = 1; k <= 2; ++k) w.push_back(g->add_input("w" + std::to_string(k), DType::kF32, Shape({3, 3})));
  Value* w3 = g->add_input("w3", DType::kF32, Shape({3, 1}));
  for (int k = 1; k <= 2; ++k) {
    const std::string s = std::to_string(k);
    Value* a = g->add_node("MatMul", {h, w[static_cast<size_t>(k - 1)]}, {"a" + s}, kOnnxDomain, "mm" + s)->output(0);
    Value* t = g->add_node("Tanh", {a}, {"t" + s}, kOnnxDomain, "tanh" + s)->output(0);
    h = g->add_node("Tanh", {t}, {"h" + s}, kOnnxDomain, "tanhb" + s)->output(0);
  }
  Value* y = g->add_node("MatMul", {h, w3}, {"y"}, kOnnxDomain, "head")->output(0);
  g->add_output(g->add_node("ReduceSum", {y}, {"loss"}, kOnnxDomain, "sum")->output(0));
  return g;
}

MemoryRequest level(int n) {
  return {.layers = {{"mm1", 0}, {"tanh1", 0}, {"tanhb1", 0}, {"mm2", 1}, {"tanh2", 1}, {"tanhb2", 1}}, .level = n};
}

std::vector<std::string> saved(const ModulePrograms& p) {
  std::vector<std::string> names;
  const auto& outputs = p.forward_graph().outputs();
  for (size_t i = 1; i < outputs.size(); ++i)
    if (outputs[i]->dtype == DType::kF32) names.push_back(outputs[i]->name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<Tensor> gradients(ModulePrograms& p) {
  Tensor x = make_tensor<float>({4, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 0.2f, 0.1f});
  Tensor w1 = make_tensor<float>({3, 3}, {0.2f, -0.1f, 0.4f, 0.3f, 0.1f, -0.5f, 0.6f, 0.2f, 0.1f});
  Tensor w2 = make_tensor<float>({3, 3}, {-0.3f, 0.2f, 0.1f, 0.5f, -0.4f, 0.2f, 0.1f, 0.3f, -0.2f});
  Tensor w3 = make_tensor<float>({3, 1}, {0.5f, -0.7f, 0.3f});
  ForwardState state;
  p.forward({x, w1, w2, w3}, state, 0);
  return p.backward(state, {make_tensor<float>({1, 1}, {1.f})});  // ReduceSum keeps dims
}

TEST(LayerRecompute, EachLevelSavesWhatItSaysAndGivesThePlainGradientsBitForBit) {
  const std::vector<std::string> wrt = {"w1", "w2", "w3"};
  ModulePrograms plain(two_layers(), {"loss"}, wrt, false, true, level(0));
  ModulePrograms one(two_layers(), {"loss"}, wrt, false, true, level(1));
  ModulePrograms two(two_layers(), {"loss"}, wrt, false, true, level(2));
  EXPECT_EQ(saved(plain), (std::vector<std::string>{"t1", "t2"}));  // h_k = Tanh(t_k) recomputed (rule 3)
  EXPECT_EQ(plain.layers_recomputed(), 0);
  // Level 1: the products' outputs stay saved, the Tanh after each is run again from them; a layer's
  // output is the next layer's input and stays saved. (Here that is more than level 0 keeps: this
  // toy has no residual stream, which a transformer saves at every level anyway.)
  EXPECT_EQ(saved(one), (std::vector<std::string>{"a1", "a2", "h1", "h2"}));
  EXPECT_EQ(one.layers_recomputed(), 2);
  EXPECT_EQ(one.nodes_recomputed(), 2);  // tanh1, tanh2
  // Level 2: each layer's output alone (the next layer's input), the products run again too.
  EXPECT_EQ(saved(two), (std::vector<std::string>{"h1", "h2"}));
  EXPECT_EQ(two.nodes_recomputed(), 4);  // mm1, tanh1, mm2, tanh2
  std::vector<Tensor> expected = gradients(plain);
  for (ModulePrograms* p : {&one, &two}) {
    std::vector<Tensor> got = gradients(*p);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::memcmp(got[i].raw(), expected[i].raw(), got[i].nbytes()), 0) << wrt[i];
  }
}

// One layer of attention spelled out: q = x wq, s = q q^T, p = Softmax(s * 0.5), o = p q. Level 1
// keeps the products' outputs but the scores, which the backward makes again from q; the gradients
// are the plain ones, bit for bit.
TEST(LayerRecompute, LevelOneRecomputesAttentionScoresFromQAndK) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF32, Shape({4, 3}));
    Value* wq = g->add_input("wq", DType::kF32, Shape({3, 3}));
    Value* q = g->add_node("MatMul", {x, wq}, {"q"}, kOnnxDomain, "mm_q")->output(0);
    Value* qt = g->add_node("Transpose", {q}, {"qt"}, kOnnxDomain, "tr")->output(0);
    Value* scores = g->add_node("MatMul", {q, qt}, {"s"}, kOnnxDomain, "mm_s")->output(0);
    Value* half = g->add_initializer("half", Tensor::scalar<float>(0.5f));
    Value* scaled = g->add_node("Mul", {scores, half}, {"ss"}, kOnnxDomain, "scale")->output(0);
    Value* probs = g->add_node("Softmax", {scaled}, {"p"}, kOnnxDomain, "softmax")->output(0);
    Value* o = g->add_node("MatMul", {probs, q}, {"o"}, kOnnxDomain, "mm_o")->output(0);
    g->add_output(g->add_node("ReduceSum", {o}, {"loss"}, kOnnxDomain, "sum")->output(0));
    return g;
  };
  const MemoryRequest request = {
      .layers = {{"mm_q", 0}, {"tr", 0}, {"mm_s", 0}, {"scale", 0}, {"softmax", 0}, {"mm_o", 0}}, .level = 1};
  auto g = make();
  std::vector<const Node*> nodes;
  for (const Node* n : g->nodes()) nodes.push_back(n);
  const RecomputeRequest r = layer_recompute(request, nodes);
  EXPECT_EQ(r.kept, (std::set<std::string>{"mm_q", "mm_o"}));
  ModulePrograms plain(make(), {"loss"}, {"wq"}, false, true, {});
  ModulePrograms one(make(), {"loss"}, {"wq"}, false, true, request);
  const auto& outputs = one.forward_graph().outputs();
  EXPECT_TRUE(std::none_of(outputs.begin(), outputs.end(), [](const Value* v) { return v->name == "s" || v->name == "p"; }));
  std::vector<Tensor> got, want;
  for (ModulePrograms* p : {&plain, &one}) {
    ForwardState state;
    p->forward({make_tensor<float>({4, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 0.2f, 0.1f}),
                make_tensor<float>({3, 3}, {0.2f, -0.1f, 0.4f, 0.3f, 0.1f, -0.5f, 0.6f, 0.2f, 0.1f})},
               state, 0);
    (p == &plain ? want : got) = p->backward(state, {make_tensor<float>({1, 1}, {1.f})});
  }
  EXPECT_EQ(std::memcmp(got[0].raw(), want[0].raw(), got[0].nbytes()), 0);
}

TEST(LayerRecompute, ACheckpointRegionWinsAndABadLevelIsRefused) {
  MemoryRequest request = level(2);
  request.checkpoint_regions = {{"mm1", 7}};
  RecomputeRequest r = layer_recompute(request, {});
  EXPECT_EQ(r.regions.at("mm1"), 7);
  request.level = 3;
  EXPECT_THROW(layer_recompute(request, {}), InvalidModel);
}

}  // namespace
}  // namespace trainrt
