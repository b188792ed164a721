// recompute_checkpoint_regions: before/after on the programs (which values the forward hands to the
// backward, which nodes the backward runs again) and numeric equivalence with the plain programs.
#include "trainrt/plan/checkpoint_recompute.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "trainrt/core/testing.h"
#include "trainrt/train/module_programs.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;

// loss = sum(Tanh(Tanh(x @ w1) @ w2) @ w3): h1 = Tanh(x @ w1) and h2 = Tanh(h1 @ w2) are what the
// plain backward saves (TanhGrad reads them; the next product's weight gradient reads them too).
std::shared_ptr<Graph> three_layers() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w1 = g->add_input("w1", DType::kF32, Shape({2, 3}));
  Value* w2 = g->add_input("w2", DType::kF32, Shape({3, 3}));
  Value* w3 = g->add_input("w3", DType::kF32, Shape({3, 1}));
  Value* x = g->add_input("x", DType::kF32, Shape({4, 2}));
  Value* h1 = g->add_node("Tanh", {g->add_node("MatMul", {x, w1}, {"a1"}, kOnnxDomain, "mm1")->output(0)}, {"h1"},
                          kOnnxDomain, "tanh1")->output(0);
  Value* h2 = g->add_node("Tanh", {g->add_node("MatMul", {h1, w2}, {"a2"}, kOnnxDomain, "mm2")->output(0)}, {"h2"},
                          kOnnxDomain, "tanh2")->output(0);
  Value* y = g->add_node("MatMul", {h2, w3}, {"y"}, kOnnxDomain, "mm3")->output(0);
  g->add_output(g->add_node("ReduceSum", {y}, {"loss"}, kOnnxDomain, "sum")->output(0));
  return g;
}

std::vector<std::string> saved_values(const ModulePrograms& p) {
  std::vector<std::string> names;
  const auto& outputs = p.forward_graph().outputs();
  for (size_t i = 1; i < outputs.size(); ++i)  // after the loss; the shapes the backward reads aside
    if (outputs[i]->dtype == DType::kF32) names.push_back(outputs[i]->name);
  std::sort(names.begin(), names.end());
  return names;
}

int recomputes(const ModulePrograms& p) {
  const auto nodes = p.backward_graph().nodes();
  return static_cast<int>(std::count_if(nodes.begin(), nodes.end(), [](const Node* n) {
    return n->name().find("/recompute") != std::string::npos;
  }));
}

TEST(CheckpointRecompute, ARegionsInsideIsRecomputedAndOnlyItsInputsAndOutputsAreSaved) {
  const std::vector<std::string> wrt = {"w1", "w2", "w3"};
  ModulePrograms plain(three_layers(), {"loss"}, wrt);
  // Region 1 = the second layer: its input h1 and output h2 stay saved, a2 = h1 @ w2 inside it
  // is not saved, and the nodes making it run again in the backward.
  ModulePrograms checkpointed(three_layers(), {"loss"}, wrt, false, true,
                              {.checkpoint_regions = {{"mm2", 1}, {"tanh2", 1}}});
  EXPECT_EQ(saved_values(plain), (std::vector<std::string>{"h1", "h2"}));
  EXPECT_EQ(saved_values(checkpointed), (std::vector<std::string>{"h1", "h2"}));  // h2 leaves the region
  EXPECT_EQ(recomputes(checkpointed), 0);  // nothing inside the region is read by the backward but h2
  // Regions 1 and 2 = both Tanh layers in one region: h1 is inside now and is recomputed from x.
  ModulePrograms both(three_layers(), {"loss"}, wrt, false, true,
                      {.checkpoint_regions = {{"mm1", 1}, {"tanh1", 1}, {"mm2", 1}, {"tanh2", 1}}});
  EXPECT_EQ(saved_values(both), (std::vector<std::string>{"h2"}));
  EXPECT_EQ(recomputes(both), 2);  // mm1 and tanh1
  for (ModulePrograms* p : {&plain, &checkpointed, &both}) EXPECT_EQ(p->unreached().size(), 0u);

  Tensor w1 = make_tensor<float>({2, 3}, {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f});
  Tensor w2 = make_tensor<float>({3, 3}, {0.2f, 0.1f, -0.3f, 0.5f, -0.4f, 0.2f, 0.1f, 0.3f, 0.6f});
  Tensor w3 = make_tensor<float>({3, 1}, {0.7f, -0.5f, 0.2f});
  Tensor x = make_tensor<float>({4, 2}, {1, 2, -1, 0.5f, 0.3f, -2, 1.5f, 1});
  std::vector<Tensor> expected;
  for (ModulePrograms* p : {&plain, &both}) {
    ForwardState state;
    p->forward({w1, w2, w3, x}, state, 0);
    auto grads = p->backward(state, {make_tensor<float>({1, 1}, {1})});  // ReduceSum keeps dims
    if (expected.empty()) {
      expected = grads;
      continue;
    }
    for (size_t i = 0; i < grads.size(); ++i) expect_close(grads[i], expected[i]);
  }
}

TEST(CheckpointRecompute, RandomNodesInsideARegionAreSavedNotRunAgain) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w = g->add_input("w", DType::kF32, Shape({2, 2}));
  Value* x = g->add_input("x", DType::kF32, Shape({3, 2}));
  Value* a = g->add_node("MatMul", {x, w}, {"a"}, kOnnxDomain, "mm")->output(0);
  Node* drop = g->add_node("Dropout", {a, g->add_initializer("ratio", Tensor::scalar(0.5f)),
                                      g->add_initializer("training", Tensor::scalar(true))},
                           {"d", "mask"}, kOnnxDomain, "drop");
  Value* t = g->add_node("Tanh", {drop->output(0)}, {"t"}, kOnnxDomain, "tanh")->output(0);
  g->add_output(g->add_node("ReduceSum", {t}, {"loss"}, kOnnxDomain, "sum")->output(0));
  ModulePrograms p(g, {"loss"}, {"w"}, false, true, {.checkpoint_regions = {{"mm", 1}, {"drop", 1}, {"tanh", 1}}});
  const auto nodes = p.backward_graph().nodes();
  EXPECT_FALSE(std::any_of(nodes.begin(), nodes.end(), [](const Node* n) { return n->op_type() == "Dropout"; }));
}

}  // namespace
}  // namespace trainrt
