// Rule 7 of choose_saved_values (loss_gradient_in_forward.h): the loss gradient through the head
// made in the forward and scaled in the backward: where it moves, what is saved instead, and the
// same gradients as the backward making it.
#include "trainrt/plan/loss_gradient_in_forward.h"

#include <gtest/gtest.h>

#include "trainrt/passes/zero_input_elimination.h"
#include "trainrt/plan/saved_values_testing.h"

namespace trainrt {
namespace {

using testing::count_ops;
using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;
using testing::expect_same_results;
using testing::train_step;
using testing::TrainingStep;

// A language model's head: h = Tanh(x @ w1) (tokens, 4), logits = h @ head (tokens, classes),
// loss = SoftmaxCrossEntropyLoss(logits, labels), mean; tokens symbolic. `logits_out`: the logits
// are a graph output too (as a Hugging Face model returns them beside its loss). `log_prob_out`:
// the loss writes log_prob (as rule 2 makes it), so the plain program differs by rule 7 alone;
// without it, the backward recomputes log_prob from the logits.
std::shared_ptr<Graph> head_graph(int64_t classes, bool logits_out, bool log_prob_out = true) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("tokens"), 6}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({Dim::symbolic("tokens")}));
  Value* w1 = g->add_initializer("w1", random_tensor({6, 4}, 41));
  Value* head = g->add_initializer("head", random_tensor({4, classes}, 42));
  Value* h = g->add_node("Tanh", {g->add_node("MatMul", {x, w1}, {"xw"})->output(0)}, {"h"})->output(0);
  Value* logits = g->add_node("MatMul", {h, head}, {"logits"})->output(0);
  std::vector<std::string> outputs = {"ce"};
  if (log_prob_out) outputs.push_back("log_prob");
  Value* ce = g->add_node("SoftmaxCrossEntropyLoss", {logits, labels}, outputs)->output(0);
  g->add_output(g->add_node("Identity", {ce}, {"loss"})->output(0));
  if (logits_out) g->add_output(logits);
  return g;
}

std::map<std::string, Tensor> head_inputs(int64_t classes = 16) {
  std::vector<int64_t> labels = {0, 15, 2, 9, 3, 3, 11, 7};
  for (int64_t& l : labels) l %= classes;
  return {{"x", random_tensor({8, 6}, 43, -2.f, 2.f)}, {"labels", make_tensor<int64_t>({8}, labels)}};
}

// Whether the forward saves a (tokens, classes) value for the backward: the scores or log_prob.
bool saves_scores(const TrainingStep& step, int64_t classes) {
  for (const std::string& name : step.programs.saved) {
    const Shape& s = step.programs.forward->find_value(name)->shape;
    if (s.rank_known && s.rank() == 2 && !s.dims[0].is_static() && s.dims[1].value == classes) return true;
  }
  return false;
}

TEST(LossGradientInForward, TheHeadsGradientIsMadeInTheForwardWithTheSameBits) {
  auto make = [] { return head_graph(16, false); };
  TrainingStep plain = train_step(make, {"w1", "head"}, head_inputs(), false);
  TrainingStep chosen = train_step(make, {"w1", "head"}, head_inputs(), true);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "SoftmaxCrossEntropyLossGrad"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.forward, "SoftmaxCrossEntropyLossGrad"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "MatMul") + count_ops(*chosen.programs.backward, "Gemm") +
                count_ops(*chosen.programs.backward, "FusedMatMul"),
            1);  // x's product's weight gradient; the head's two products are in the forward
  EXPECT_TRUE(saves_scores(plain, 16));
  EXPECT_FALSE(saves_scores(chosen, 16));  // dh (tokens, 4) and the head's gradient (4, 16) instead
  expect_same_results(chosen, plain, 0, 0);
}

TEST(LossGradientInForward, ALossGradientOtherThanOneScalesTheResults) {
  auto make = [] { return head_graph(16, false); };
  const std::map<std::string, Tensor> dl = {{"loss", Tensor::scalar<float>(0.37f)}};
  TrainingStep plain = train_step(make, {"w1", "head"}, head_inputs(), false, dl);
  TrainingStep chosen = train_step(make, {"w1", "head"}, head_inputs(), true, dl);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 1);
  expect_same_results(chosen, plain);
}

TEST(LossGradientInForward, NotWhereTheClassesAreFewerThanTheHiddenSize) {
  auto make = [] { return head_graph(3, false); };
  TrainingStep chosen = train_step(make, {"w1", "head"}, head_inputs(3), true);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 0);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "SoftmaxCrossEntropyLossGrad"), 1);
}

// Logits returned beside the loss: the products of their own gradient stay in the backward, summed
// at dh and the head's gradient; with no gradient for the logits they go.
TEST(LossGradientInForward, ReturnedLogitsKeepTheirOwnGradientInTheBackward) {
  auto make = [] { return head_graph(16, true); };
  const std::map<std::string, Tensor> both = {{"loss", Tensor::scalar<float>(1.f)},
                                              {"logits", random_tensor({8, 16}, 44)}};
  TrainingStep plain = train_step(make, {"w1", "head"}, head_inputs(), false, both);
  TrainingStep chosen = train_step(make, {"w1", "head"}, head_inputs(), true, both);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "SoftmaxCrossEntropyLossGrad"), 0);
  // dh = dL * (dScores W) + dLogits_out W against (dL * dScores + dLogits_out) W: one rounding apart.
  expect_same_results(chosen, plain, 1e-5, 1e-6);

  // Without the logits' gradient (zeros), ZeroInputElimination leaves no product reading it.
  Graph& backward = *chosen.programs.backward;
  std::string logits_grad;
  for (const Value* v : backward.inputs())
    if (v->name.find("logits") != std::string::npos && v->name.find("grad") != std::string::npos) logits_grad = v->name;
  ASSERT_FALSE(logits_grad.empty());
  ZeroInputElimination({logits_grad}).apply(backward);
  EXPECT_TRUE(backward.find_value(logits_grad)->uses.empty());
}

// Logits returned and no log_prob kept (rule 2 leaves the recompute where the scores are a graph
// output): the recompute moves to the forward too, and the backward no longer reads the logits, so
// a caller that drops them (the Hugging Face Trainer keeps only the loss) frees them before it.
TEST(LossGradientInForward, TheLogProbRecomputeMovesToTheForwardWithIt) {
  auto make = [] { return head_graph(16, true, /*log_prob_out=*/false); };
  TrainingStep plain = train_step(make, {"w1", "head"}, head_inputs(), false);
  TrainingStep chosen = train_step(make, {"w1", "head"}, head_inputs(), true);
  EXPECT_EQ(count_ops(*plain.programs.backward, "LogSoftmax"), 1);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "LogSoftmax"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.forward, "LogSoftmax"), 1);
  const auto& reads = chosen.programs.backward_inputs;
  EXPECT_EQ(std::find(reads.begin(), reads.end(), "logits"), reads.end());
  expect_same_results(chosen, plain, 0, 0);
}

// Two GELU layers under the head: rule 3 recomputes the first layer's GELU in the backward for the
// second's weight gradient. The forward copies sit where the chain began in the joint's insertion
// order, so the backward runs its scaled gradients first and the recompute just before its reader
// (copies left at the end made every ready recompute run at the start, all live at once).
TEST(LossGradientInForward, TheBackwardStillRunsItsRecomputeWhereItIsRead) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 20);
    Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("tokens"), 6}));
    Value* labels = g->add_input("labels", DType::kI64, Shape({Dim::symbolic("tokens")}));
    Value* h = x;
    for (int layer = 0; layer < 2; ++layer) {
      Value* w = g->add_initializer(fmt("w", layer), random_tensor({layer == 0 ? 6 : 5, 5}, 50 + layer));
      h = g->add_node("MatMul", {h, w}, {fmt("xw", layer)})->output(0);
      h = g->add_node("Gelu", {h}, {fmt("g", layer)})->output(0);
    }
    Value* logits = g->add_node("MatMul", {h, g->add_initializer("head", random_tensor({5, 16}, 52))}, {"logits"})->output(0);
    Value* ce = g->add_node("SoftmaxCrossEntropyLoss", {logits, labels}, {"ce", "log_prob"})->output(0);
    g->add_output(g->add_node("Identity", {ce}, {"loss"})->output(0));
    return g;
  };
  TrainingStep chosen = train_step(make, {"w0", "w1", "head"}, head_inputs(), true);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 1);
  EXPECT_EQ(chosen.made.pointwise_recomputed, 1);
  const std::vector<Node*> order = chosen.programs.backward->topological_order();
  auto position = [&](const std::string& op) {
    return std::find_if(order.begin(), order.end(), [&](const Node* n) { return n->op_type() == op; }) - order.begin();
  };
  EXPECT_LT(position("Mul"), position("Gelu"));
  EXPECT_LT(position("GeluGrad"), position("Gelu"));  // the second layer's GELU gradient comes first
}

}  // namespace
}  // namespace trainrt
