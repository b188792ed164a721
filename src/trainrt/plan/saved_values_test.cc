// choose_saved_values: which nodes move or change (before/after the rewrite), what the forward then
// saves, and forward + backward programs giving the same loss and gradients as without the choices.
#include "trainrt/plan/saved_values.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "trainrt/core/testing.h"
#include "trainrt/plan/saved_values_testing.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;
using testing::count_ops;
using testing::expect_same_results;
using testing::saves;
using testing::train_step;
using testing::TrainingStep;

// loss = ReduceSum(Reshape(x @ w, (-1, 10))^2) with a symbolic batch dim, so the gradients of
// Reshape and ReduceSum read Shape(x @ w) and Shape(sq) at run time.
std::shared_ptr<Graph> reshape_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 6}));
  Value* w = g->add_initializer("w", random_tensor({6, 5}, 1));
  Value* h = g->add_node("MatMul", {x, w}, {"h"})->output(0);                             // (batch, 5)
  Value* shape = g->add_initializer("shape", Tensor::from_i64({-1, 10}));
  Value* r = g->add_node("Reshape", {h, shape}, {"r"})->output(0);                        // (batch / 2, 10)
  Value* sq = g->add_node("Mul", {r, r}, {"sq"})->output(0);
  Node* loss = g->add_node("ReduceSum", {sq}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  return g;
}

TEST(SavedValues, TheBackwardKeepsTheShapeOfAValueInsteadOfTheValue) {
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({4, 6}, 2)}};
  TrainingStep plain = train_step(reshape_graph, {"w"}, inputs, false);
  TrainingStep chosen = train_step(reshape_graph, {"w"}, inputs, true);
  // Saved only for their shapes: h (Reshape's gradient) and sq (ReduceSum's).
  EXPECT_TRUE(saves(plain.programs, "h"));
  EXPECT_TRUE(saves(plain.programs, "sq"));
  EXPECT_FALSE(saves(chosen.programs, "h"));
  EXPECT_FALSE(saves(chosen.programs, "sq"));
  EXPECT_TRUE(saves(chosen.programs, "r"));  // the Mul gradient reads r itself
  const int shapes = count_ops(*plain.programs.backward, "Shape");
  EXPECT_GE(shapes, 2);
  EXPECT_EQ(chosen.made.shapes_moved_to_forward, shapes);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "Shape"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.forward, "Shape"), shapes);
  expect_same_results(chosen, plain);
}

// loss = SoftmaxCrossEntropyLoss(Tanh(x) @ w, labels) [+ ReduceSum(scores^2) when `scores_read_again`]:
// scores (8, 5), mean reduction. Tanh(x) has more features (6) than there are classes, so rule 7
// (whose gradient of Tanh(x) would be larger than log_prob) leaves the loss gradient in the backward.
std::shared_ptr<Graph> cross_entropy_graph(bool scores_read_again) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({8, 6}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({8}));
  Value* w = g->add_initializer("w", random_tensor({6, 5}, 3));
  Value* t = g->add_node("Tanh", {x}, {"t"})->output(0);
  Value* scores = g->add_node("MatMul", {t, w}, {"scores"})->output(0);
  Value* loss = g->add_node("SoftmaxCrossEntropyLoss", {scores, labels}, {"ce"})->output(0);
  if (scores_read_again) {
    Value* sq = g->add_node("Mul", {scores, scores}, {"sq"})->output(0);
    Node* sum = g->add_node("ReduceSum", {sq}, {"penalty"});
    sum->set_attr("keepdims", Attribute::of_int(0));
    loss = g->add_node("Add", {loss, sum->output(0)}, {"total"})->output(0);
  }
  g->add_output(g->add_node("Identity", {loss}, {"loss"})->output(0));
  return g;
}

std::map<std::string, Tensor> cross_entropy_inputs() {
  return {{"x", random_tensor({8, 6}, 4, -3.f, 3.f)}, {"labels", make_tensor<int64_t>({8}, {0, 4, 2, 1, 3, 3, 0, 2})}};
}

TEST(SavedValues, TheLossWritesLogProbInsteadOfTheBackwardRecomputingIt) {
  auto make = [] { return cross_entropy_graph(false); };
  TrainingStep plain = train_step(make, {"w", "x"}, cross_entropy_inputs(), false);
  TrainingStep chosen = train_step(make, {"w", "x"}, cross_entropy_inputs(), true);
  EXPECT_EQ(chosen.made.log_probs_kept, 1);
  EXPECT_EQ(chosen.made.loss_gradients_in_forward, 0);
  EXPECT_EQ(count_ops(*plain.programs.backward, "LogSoftmax"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "LogSoftmax"), 0);
  EXPECT_TRUE(saves(plain.programs, "scores"));
  EXPECT_FALSE(saves(chosen.programs, "scores"));
  ASSERT_EQ(chosen.programs.saved.size(), 1u);  // log_prob only (rule 3 makes Tanh(x) again from x)
  const Node* loss = chosen.programs.forward->find_value(chosen.programs.saved[0])->producer;
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->op_type(), "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(loss->output(0)->name, "ce");
  expect_same_results(chosen, plain);
}

TEST(SavedValues, TheRecomputeStaysWhenTheBackwardReadsTheScoresAnyway) {
  auto make = [] { return cross_entropy_graph(true); };
  TrainingStep plain = train_step(make, {"w"}, cross_entropy_inputs(), false);
  TrainingStep chosen = train_step(make, {"w"}, cross_entropy_inputs(), true);
  EXPECT_EQ(chosen.made.log_probs_kept, 0);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "LogSoftmax"), 1);
  EXPECT_TRUE(saves(chosen.programs, "scores"));
  expect_same_results(chosen, plain);
}

// loss = ReduceSum((Gelu(x @ w1) @ w2)^2), x (4, 3), w1 (3, 6), w2 (6, 2): the GELU gradient reads
// h = x @ w1 and w2's gradient reads g = Gelu(h), so without the choice both are saved.
std::shared_ptr<Graph> gelu_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 20);
  Value* x = g->add_input("x", DType::kF32, Shape({4, 3}));
  Value* w1 = g->add_initializer("w1", random_tensor({3, 6}, 5));
  Value* w2 = g->add_initializer("w2", random_tensor({6, 2}, 6));
  Value* h = g->add_node("MatMul", {x, w1}, {"h"})->output(0);
  Value* gelu = g->add_node("Gelu", {h}, {"g"})->output(0);
  Value* o = g->add_node("MatMul", {gelu, w2}, {"o"})->output(0);
  Value* sq = g->add_node("Mul", {o, o}, {"sq"})->output(0);
  Node* loss = g->add_node("ReduceSum", {sq}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  return g;
}

TEST(SavedValues, APointwiseOutputIsRecomputedFromItsSavedInput) {
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({4, 3}, 7)}};
  TrainingStep plain = train_step(gelu_graph, {"w1", "w2"}, inputs, false);
  TrainingStep chosen = train_step(gelu_graph, {"w1", "w2"}, inputs, true);
  EXPECT_TRUE(saves(plain.programs, "h"));
  EXPECT_TRUE(saves(plain.programs, "g"));
  EXPECT_EQ(chosen.made.pointwise_recomputed, 1);
  EXPECT_TRUE(saves(chosen.programs, "h"));
  EXPECT_FALSE(saves(chosen.programs, "g"));
  EXPECT_EQ(count_ops(*plain.programs.backward, "Gelu"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "Gelu"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.forward, "Gelu"), 1);
  // The recompute runs just before w2's weight-gradient Gemm reads it (its output lives one step),
  // after the gradient chain reached there, not at the start of the backward or at its end.
  const std::vector<Node*> order = chosen.programs.backward->topological_order();
  auto position = [&](const std::string& op) {
    return std::find_if(order.begin(), order.end(), [&](const Node* n) { return n->op_type() == op; }) - order.begin();
  };
  const auto gelu = position("Gelu");
  ASSERT_LT(gelu + 1, static_cast<std::ptrdiff_t>(order.size()));
  const Node& reader = *order[static_cast<size_t>(gelu + 1)];
  EXPECT_EQ(reader.op_type(), "Gemm");
  EXPECT_TRUE(reader.input(0) == order[static_cast<size_t>(gelu)]->output(0) ||
              reader.input(1) == order[static_cast<size_t>(gelu)]->output(0));
  EXPECT_LT(position("Gemm"), gelu);      // o's input gradient first
  EXPECT_LT(gelu, position("GeluGrad"));
  expect_same_results(chosen, plain);
}

// loss = ReduceSum(f * f), f = Cast(Cast(x @ w, bf16), f32): the Mul gradient reads the f32 f; its
// bf16 input is saved instead (half the bytes, though nothing else read it) and the exact widening
// Cast runs again in the backward.
TEST(SavedValues, AWideningCastIsRecomputedFromItsNarrowerInput) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF32, Shape({4, 3}));
    Value* w = g->add_initializer("w", random_tensor({3, 6}, 41));
    Value* h = g->add_node("MatMul", {x, w}, {"h"})->output(0);
    Node* narrow = g->add_node("Cast", {h}, {"hb"});
    narrow->set_attr("to", Attribute::of_int(dtype_to_onnx(DType::kBF16)));
    Node* widen = g->add_node("Cast", {narrow->output(0)}, {"f"});
    widen->set_attr("to", Attribute::of_int(dtype_to_onnx(DType::kF32)));
    Value* f = widen->output(0);
    Node* loss = g->add_node("ReduceSum", {g->add_node("Mul", {f, f}, {"sq"})->output(0)}, {"loss"});
    loss->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(loss->output(0));
    return g;
  };
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({4, 3}, 42)}};
  TrainingStep plain = train_step(make, {"w"}, inputs, false);
  TrainingStep chosen = train_step(make, {"w"}, inputs, true);
  EXPECT_TRUE(saves(plain.programs, "f"));
  EXPECT_FALSE(saves(plain.programs, "hb"));
  EXPECT_EQ(chosen.made.pointwise_recomputed, 1);
  EXPECT_FALSE(saves(chosen.programs, "f"));
  EXPECT_TRUE(saves(chosen.programs, "hb"));
  EXPECT_EQ(count_ops(*chosen.programs.backward, "Cast"), count_ops(*plain.programs.backward, "Cast") + 1);
  expect_same_results(chosen, plain, 0, 0);
}

// A Relu whose gradient reads its output only: the input is not saved, so recomputing would save
// the input instead of the output, no fewer bytes. The output stays saved.
TEST(SavedValues, NothingIsRecomputedWhenItsInputWouldHaveToBeSaved) {
  auto relu_graph = [] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF32, Shape({4, 3}));
    Value* w1 = g->add_initializer("w1", random_tensor({3, 6}, 5));
    Value* w2 = g->add_initializer("w2", random_tensor({6, 2}, 6));
    Value* h = g->add_node("MatMul", {x, w1}, {"h"})->output(0);
    Value* r = g->add_node("Relu", {h}, {"r"})->output(0);
    Value* o = g->add_node("MatMul", {r, w2}, {"o"})->output(0);
    Node* loss = g->add_node("ReduceSum", {g->add_node("Mul", {o, o}, {"sq"})->output(0)}, {"loss"});
    loss->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(loss->output(0));
    return g;
  };
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({4, 3}, 7)}};
  TrainingStep chosen = train_step(relu_graph, {"w1", "w2"}, inputs, true);
  EXPECT_EQ(chosen.made.pointwise_recomputed, 0);
  EXPECT_TRUE(saves(chosen.programs, "r"));
  EXPECT_FALSE(saves(chosen.programs, "h"));
  EXPECT_EQ(count_ops(*chosen.programs.backward, "Relu"), 0);
}

// loss = ReduceSum(Conv(Relu(BatchNormalization(Conv(x, w1))), w2)^2), batch norm in training
// mode: the ResNet block's Conv -> BN -> ReLU -> Conv (x (2, 3, 5, 5), both convs 3x3, pad 1).
std::shared_ptr<Graph> conv_bn_relu_graph(const std::string& after_relu) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3, 5, 5}));
  Value* w1 = g->add_initializer("w1", random_tensor({4, 3, 3, 3}, 11));
  Value* w2 = g->add_initializer("w2", random_tensor({4, 4, 3, 3}, 12));
  const Attribute pads = Attribute::of_ints({1, 1, 1, 1});
  Node* conv1 = g->add_node("Conv", {x, w1}, {"c"});
  conv1->set_attr("pads", pads);
  std::vector<Value*> stats;
  for (const char* name : {"scale", "bias", "mean", "var"})
    stats.push_back(g->add_initializer(name, random_tensor({4}, static_cast<uint32_t>(name[0]))));
  stats[3] = g->add_node("Abs", {stats[3]}, {"var_abs"})->output(0);  // a (C) value the forward computes
  Node* bn = g->add_node("BatchNormalization", {conv1->output(0), stats[0], stats[1], stats[2], stats[3]},
                         {"y", "running_mean", "running_var"});
  bn->set_attr("training_mode", Attribute::of_int(1));
  Value* r = g->add_node("Relu", {bn->output(0)}, {"r"})->output(0);  // (2, 4, 5, 5)
  Node* next = after_relu == "Conv" ? g->add_node("Conv", {r, w2}, {"o"}) : g->add_node(after_relu, {r}, {"o"});
  if (after_relu == "Conv") next->set_attr("pads", pads);
  if (after_relu == "MaxPool") next->set_attr("kernel_shape", Attribute::of_ints({2, 2}));
  Value* o = next->output(0);
  Node* loss = g->add_node("ReduceSum", {g->add_node("Mul", {o, o}, {"sq"})->output(0)}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  return g;
}

TEST(SavedValues, ABatchNormAndReluBeforeAConvAreRecomputedFromTheBatchNormInput) {
  auto make = [] { return conv_bn_relu_graph("Conv"); };
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({2, 3, 5, 5}, 13)}};
  const std::vector<std::string> wrt = {"w1", "w2", "scale", "bias"};
  TrainingStep plain = train_step(make, wrt, inputs, false);
  TrainingStep chosen = train_step(make, wrt, inputs, true);
  EXPECT_TRUE(saves(plain.programs, "c"));
  EXPECT_TRUE(saves(plain.programs, "r"));
  EXPECT_EQ(chosen.made.batch_norms_recomputed, 1);
  EXPECT_TRUE(saves(chosen.programs, "c"));
  EXPECT_FALSE(saves(chosen.programs, "r"));
  EXPECT_TRUE(saves(chosen.programs, "var_abs"));  // the (C) running variance the recompute reads
  EXPECT_EQ(count_ops(*chosen.programs.backward, "BatchNormalization"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "Relu"), 1);
  // The same kernel on the same input: the same bits.
  expect_same_results(chosen, plain, 0, 0);
}

// The stem's Conv -> BN -> ReLU -> MaxPool: rule 4 does not apply (MaxPoolGrad would hold the
// recomputed R beside its R-sized output); rule 5 does: the backward reads the pooled P (saved for
// the next reader anyway) and the u8 argmax instead of R, and gives the same bits.
TEST(SavedValues, AMaxPoolAfterAReluKeepsItsArgmaxInsteadOfTheReluOutput) {
  auto make = [] { return conv_bn_relu_graph("MaxPool"); };
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({2, 3, 5, 5}, 13)}};
  const std::vector<std::string> wrt = {"w1", "scale", "bias"};
  TrainingStep plain = train_step(make, wrt, inputs, false);
  TrainingStep chosen = train_step(make, wrt, inputs, true);
  EXPECT_TRUE(saves(plain.programs, "r"));
  EXPECT_EQ(chosen.made.batch_norms_recomputed, 0);
  EXPECT_EQ(chosen.made.pools_by_argmax, 1);
  EXPECT_FALSE(saves(chosen.programs, "r"));
  EXPECT_TRUE(saves(chosen.programs, "o"));
  EXPECT_TRUE(saves(chosen.programs, "o/argmax"));
  EXPECT_EQ(count_ops(*chosen.programs.forward, "MaxPool"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.forward, "MaxPoolWithArgmax"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "MaxPoolGrad"), 0);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "MaxPoolArgmaxGrad"), 1);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "ReluGrad"), 1);
  expect_same_results(chosen, plain, 0, 0);
}

// A ReLU output the forward also reads outside the MaxPool (here a residual Add) is not the stem
// pattern: MaxPoolGrad keeps reading it.
TEST(SavedValues, AMaxPoolOnAReluOutputReadElsewhereKeepsMaxPoolGrad) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF32, Shape({1, 2, 4, 4}));
    Value* w = g->add_initializer("w", random_tensor({1, 2, 4, 4}, 31));
    Value* r = g->add_node("Relu", {g->add_node("Mul", {x, w}, {"h"})->output(0)}, {"r"})->output(0);
    Node* pool = g->add_node("MaxPool", {r}, {"p"});
    pool->set_attr("kernel_shape", Attribute::of_ints({2, 2}));
    pool->set_attr("strides", Attribute::of_ints({2, 2}));
    Value* p = pool->output(0);
    Node* a = g->add_node("ReduceSum", {g->add_node("Mul", {p, p}, {"pp"})->output(0)}, {"a"});
    Node* b = g->add_node("ReduceSum", {g->add_node("Mul", {r, r}, {"rr"})->output(0)}, {"b"});
    for (Node* sum : {a, b}) sum->set_attr("keepdims", Attribute::of_int(0));
    Node* loss = g->add_node("Add", {a->output(0), b->output(0)}, {"loss"});
    g->add_output(loss->output(0));
    return g;
  };
  const std::map<std::string, Tensor> inputs = {{"x", random_tensor({1, 2, 4, 4}, 32)}};
  TrainingStep chosen = train_step(make, {"w"}, inputs, true);
  EXPECT_EQ(chosen.made.pools_by_argmax, 0);
  EXPECT_EQ(count_ops(*chosen.programs.backward, "MaxPoolGrad"), 1);
}

}  // namespace
}  // namespace trainrt
