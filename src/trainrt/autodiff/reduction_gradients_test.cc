// Gradient rules of the reduction family (Reduce*, Softmax, LogSoftmax, LayerNormalization,
// SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss) against f64 finite differences: single
// nodes over attribute variants, graphs with symbolic dims, and a small classifier end to end.
#include <gtest/gtest.h>

#include <random>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/runtime/session.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::expect_graph_gradients_match;
using testing::GradCheckOptions;
using testing::make_tensor;
using testing::random_f64;
using testing::WorstErrors;

Attribute int_attr(int64_t v) { return Attribute::of_int(v); }
Attribute ints_attr(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

// Class labels in [0, classes) of the given dims and integer type.
Tensor random_labels(std::vector<int64_t> dims, int64_t classes, uint32_t seed, DType t = DType::kI64) {
  Tensor l = Tensor::empty(t, std::move(dims));
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < l.numel(); ++i) {
    const int64_t v = static_cast<int64_t>(rng() % static_cast<uint32_t>(classes));
    if (t == DType::kI32) l.data<int32_t>()[i] = static_cast<int32_t>(v);
    else l.data<int64_t>()[i] = v;
  }
  return l;
}

// ---- Reduce* ----

TEST(ReductionGradients, ReduceOpsMatchFiniteDifferences) {
  WorstErrors worst;
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
    const bool positive = std::string(op) == "ReduceLogSum";
    const Tensor x = random_f64({2, 3, 4}, 5, positive ? 0.5 : -1.0, 1.5);
    const auto spec = [&](int keepdims, std::map<std::string, Attribute> more = {}, int opset = 18) {
      more["keepdims"] = int_attr(keepdims);
      return NodeSpec{.op = op, .attrs = std::move(more), .opset = opset};
    };
    // Axes as an input that is not a constant: the rules' general (Unsqueeze by value) path.
    worst.check(spec(1), {x, Tensor::from_i64({1})});
    worst.check(spec(0), {x, Tensor::from_i64({-1, 0})});
    // No axes: every axis, or none with noop_with_empty_axes (Y = f(X) elementwise).
    worst.check(spec(0), {x});
    worst.check(spec(1), {x});
    worst.check(spec(0, {{"noop_with_empty_axes", int_attr(1)}}), {x, Tensor::from_i64({})});
    // Axes as an attribute (before opset 13 for ReduceSum, 18 for the others).
    worst.check(spec(0, {{"axes", ints_attr({0, -1})}}, 11), {x});
    worst.check(spec(1, {{"axes", ints_attr({1})}}, 11), {x});
  }
}

// loss = ReduceSum(op(x) over axis 1); returns d loss / d x.
Tensor reduce_then_sum_grad(const std::string& op, const Tensor& x) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 13);
  Value* in = g->add_input("x", DType::kF64, Shape::of(x.dims()));
  Node* red = g->add_node(op, {in}, {"y"});
  red->set_attr("axes", ints_attr({1}));
  red->set_attr("keepdims", int_attr(0));
  Node* loss = g->add_node("ReduceSum", {red->output(0)}, {"loss"});
  loss->set_attr("keepdims", int_attr(0));
  g->add_output(loss->output(0));
  build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
  return Session(g).run({x})[1];
}

TEST(ReductionGradients, MaxAndMinSplitTiesEvenlyAndL2IsZeroAtZero) {
  const Tensor x = make_tensor<double>({2, 3}, {1, 3, 3, 2, 2, 2});
  const double third = 1.0 / 3;
  expect_close(reduce_then_sum_grad("ReduceMax", x), make_tensor<double>({2, 3}, {0, 0.5, 0.5, third, third, third}));
  expect_close(reduce_then_sum_grad("ReduceMin", x), make_tensor<double>({2, 3}, {1, 0, 0, third, third, third}));
  const Tensor z = make_tensor<double>({2, 2}, {0, 0, 3, 4});
  expect_close(reduce_then_sum_grad("ReduceL2", z), make_tensor<double>({2, 2}, {0, 0, 0.6, 0.8}));
}

TEST(ReductionGradients, ReduceProdHasNoRuleAndSaysSo) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF64, Shape({3}));
  Node* prod = g->add_node("ReduceProd", {x}, {"loss"}, kOnnxDomain, "my_prod");
  prod->set_attr("keepdims", int_attr(0));
  g->add_output(prod->output(0));
  try {
    build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("my_prod"), std::string::npos) << e.what();
  }
}

// ---- Softmax, LogSoftmax, LayerNormalization ----

TEST(ReductionGradients, SoftmaxAndLogSoftmaxMatchFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 9, -2.0, 2.0);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    worst.check({.op = op}, {x});  // axis -1
    for (int64_t axis : {0, 1, -2})
      worst.check({.op = op, .attrs = {{"axis", int_attr(axis)}}, .opset = 13}, {x});
    // Before opset 13: normalized over the flattened dims [axis, r).
    worst.check({.op = op, .opset = 11}, {x});  // axis 1: rows of 12
    for (int64_t axis : {0, 2})
      worst.check({.op = op, .attrs = {{"axis", int_attr(axis)}}, .opset = 11}, {x});
    worst.check({.op = op}, {random_f64({7}, 10)});
  }
}

TEST(ReductionGradients, LayerNormalizationMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 11, -2.0, 2.0);
  const auto spec = [](int64_t axis, int outputs = 1, float epsilon = 1e-5f) {
    return NodeSpec{.op = "LayerNormalization",
                    .attrs = {{"axis", int_attr(axis)}, {"epsilon", Attribute::of_float(epsilon)}},
                    .num_outputs = outputs};
  };
  worst.check(spec(-1), {x, random_f64({4}, 12), random_f64({4}, 13)});
  worst.check(spec(-1, 3), {x, random_f64({4}, 12), random_f64({4}, 13)});  // Mean, InvStdDev produced
  worst.check(spec(1), {x, random_f64({3, 4}, 14), random_f64({3, 4}, 15)});
  worst.check(spec(1, 3, 0.5f), {x, random_f64({3, 4}, 14)});                  // no bias
  worst.check(spec(0), {x, random_f64({2, 3, 4}, 16), random_f64({1}, 17)});    // every axis
  // Scale and bias broadcast within the normalized dims, or carry leading 1s.
  worst.check(spec(1), {x, random_f64({4}, 18), random_f64({3, 1}, 19)});
  worst.check(spec(-1), {x, random_f64({1, 1, 4}, 20), random_f64({1, 4}, 21)});
}

TEST(ReductionGradients, LayerNormalizationRejectsGradientsIntoMeanAndPerRowScales) {
  const auto graph = [](std::vector<int64_t> scale_dims, bool use_mean) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF64, Shape({2, 4}));
    Value* s = g->add_input("s", DType::kF64, Shape::of(scale_dims));
    Node* ln = g->add_node("LayerNormalization", {x, s}, {"y", "mean", "inv_std"}, kOnnxDomain, "my_ln");
    Node* loss = g->add_node("ReduceSum", {ln->output(use_mean ? 1 : 0)}, {"loss"});
    loss->set_attr("keepdims", int_attr(0));
    g->add_output(loss->output(0));
    return g;
  };
  for (auto [dims, use_mean] : {std::pair<std::vector<int64_t>, bool>{{4}, true}, {{2, 4}, false}}) {
    auto g = graph(dims, use_mean);
    try {
      build_gradients(*g, {.loss = "loss", .wrt = {"x", "s"}});
      FAIL() << "expected UnsupportedOp";
    } catch (const UnsupportedOp& e) {
      EXPECT_NE(std::string(e.what()).find("my_ln"), std::string::npos) << e.what();
    }
  }
}

TEST(ReductionGradients, LayerNormalizationReadsForwardStatisticsOnlyWhenAsPreciseAsX) {
  for (DType t : {DType::kF32, DType::kF64}) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", t, Shape({2, 4}));
    Value* s = g->add_input("s", t, Shape({4}));
    Node* ln = g->add_node("LayerNormalization", {x, s}, {"y", "mean", "inv_std"});
    Node* loss = g->add_node("ReduceSum", {ln->output(0)}, {"loss"});
    loss->set_attr("keepdims", int_attr(0));
    g->add_output(loss->output(0));
    build_gradients(*g, {.loss = "loss", .wrt = {"x", "s"}});
    int grads = 0;
    for (const Node* n : g->nodes()) {
      if (n->op_type() != "LayerNormalizationGrad") continue;
      ++grads;
      // Mean and InvStdDev are f32 (stash_type 1): read for f32 X, recomputed for f64 X.
      EXPECT_EQ(n->num_inputs(), t == DType::kF32 ? 5 : 3) << dtype_name(t);
    }
    EXPECT_EQ(grads, 1);
  }
}

// ---- Losses ----

TEST(ReductionGradients, SoftmaxCrossEntropyLossMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor scores = random_f64({4, 5}, 21, -2.0, 2.0);
  const Tensor labels = make_tensor<int64_t>({4}, {1, 0, 4, 1});
  const Tensor weights = random_f64({5}, 22, 0.5, 2.0);
  const GradCheckOptions scores_only{.wrt = {0}};
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (int outputs : {1, 2}) {  // with output 2 (log_prob) carrying a gradient of its own
      NodeSpec spec{.op = "SoftmaxCrossEntropyLoss", .attrs = {{"reduction", Attribute::of_string(reduction)}},
                    .num_outputs = outputs};
      worst.check(spec, {scores, labels}, scores_only);
      worst.check(spec, {scores, labels, weights}, scores_only);
      spec.attrs["ignore_index"] = int_attr(1);  // samples 0 and 3 are ignored
      worst.check(spec, {scores, labels, weights}, scores_only);
    }
  }
  // (N, C, d1, d2) scores, i32 labels, a negative ignore_index present among the labels.
  const Tensor scores4 = random_f64({2, 3, 2, 2}, 23, -2.0, 2.0);
  Tensor labels3 = random_labels({2, 2, 2}, 3, 24, DType::kI32);
  labels3.data<int32_t>()[5] = -100;
  for (const char* reduction : {"none", "mean"}) {
    NodeSpec spec{.op = "SoftmaxCrossEntropyLoss",
                  .attrs = {{"reduction", Attribute::of_string(reduction)}, {"ignore_index", int_attr(-100)}}};
    worst.check(spec, {scores4, labels3, random_f64({3}, 25, 0.5, 2.0)}, scores_only);
    spec.opset = 12;  // log_prob recomputed with the class axis moved last
    worst.check(spec, {scores4, labels3}, scores_only);
  }
}

TEST(ReductionGradients, NegativeLogLikelihoodLossMatchesFiniteDifferences) {
  WorstErrors worst;
  const GradCheckOptions input_only{.wrt = {0}};
  const Tensor input = random_f64({4, 5}, 31);
  const Tensor labels = make_tensor<int64_t>({4}, {2, 2, 0, 4});
  const Tensor weights = random_f64({5}, 32, 0.5, 2.0);
  for (const char* reduction : {"none", "sum", "mean"}) {
    NodeSpec spec{.op = "NegativeLogLikelihoodLoss", .attrs = {{"reduction", Attribute::of_string(reduction)}}};
    worst.check(spec, {input, labels}, input_only);
    worst.check(spec, {input, labels, weights}, input_only);
    spec.attrs["ignore_index"] = int_attr(2);
    worst.check(spec, {input, labels, weights}, input_only);
  }
  NodeSpec nd{.op = "NegativeLogLikelihoodLoss", .attrs = {{"reduction", Attribute::of_string("mean")}}};
  worst.check(nd, {random_f64({2, 3, 4}, 33), random_labels({2, 4}, 3, 34, DType::kI32), random_f64({3}, 35, 0.5, 2.0)},
              input_only);
}

TEST(ReductionGradients, LossWeightsGetNoGradient) {
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", DType::kF64, Shape({2, 3}));
    Value* labels = g->add_input("labels", DType::kI64, Shape({2}));
    Value* w = g->add_input("w", DType::kF64, Shape({3}));
    g->add_output(g->add_node(op, {x, labels, w}, {"loss"}, kOnnxDomain, "my_loss")->output(0));
    EXPECT_THROW(build_gradients(*g, {.loss = "loss", .wrt = {"x", "w"}}), UnsupportedOp) << op;
  }
}

// ---- Graphs ----

// x (batch, 5) -> LayerNormalization -> LogSoftmax -> ReduceMean over the batch ->
// ReduceSumSquare: every rule of the family on a symbolic batch dim.
std::shared_ptr<Graph> symbolic_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF64, Shape({Dim::symbolic("batch"), 5}));
  Value* s = g->add_input("scale", DType::kF64, Shape({5}));
  Value* b = g->add_input("bias", DType::kF64, Shape({5}));
  Value* ln = g->add_node("LayerNormalization", {x, s, b}, {"ln"})->output(0);
  Value* lsm = g->add_node("LogSoftmax", {ln}, {"lsm"})->output(0);
  Node* mean = g->add_node("ReduceMean", {lsm, g->add_initializer("axes", Tensor::from_i64({0}))}, {"mean"});
  mean->set_attr("keepdims", int_attr(0));
  Node* loss = g->add_node("ReduceSumSquare", {mean->output(0)}, {"loss"});
  loss->set_attr("keepdims", int_attr(0));
  g->add_output(loss->output(0));
  return g;
}

TEST(ReductionGradients, SymbolicBatchDimsGraph) {
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    expect_graph_gradients_match(symbolic_graph,
                                 {random_f64({batch, 5}, 41), random_f64({5}, 42), random_f64({5}, 43)}, {0, 1, 2});
  }
}

// A tiny classifier: x (batch, 6) -> MatMul w1 (6, 8) -> Add b1 -> LayerNormalization (g, beta)
// -> Gelu -> MatMul w2 (8, 4) -> SoftmaxCrossEntropyLoss(mean) against labels (batch).
std::shared_ptr<Graph> classifier_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 20);
  const Dim batch = Dim::symbolic("batch");
  Value* x = g->add_input("x", DType::kF64, Shape({batch, 6}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({batch}));
  Value* w1 = g->add_input("w1", DType::kF64, Shape({6, 8}));
  Value* b1 = g->add_input("b1", DType::kF64, Shape({8}));
  Value* gamma = g->add_input("gamma", DType::kF64, Shape({8}));
  Value* beta = g->add_input("beta", DType::kF64, Shape({8}));
  Value* w2 = g->add_input("w2", DType::kF64, Shape({8, 4}));
  Value* h = g->add_node("MatMul", {x, w1}, {"h"})->output(0);
  h = g->add_node("Add", {h, b1}, {"hb"})->output(0);
  h = g->add_node("LayerNormalization", {h, gamma, beta}, {"hn"})->output(0);
  h = g->add_node("Gelu", {h}, {"ha"})->output(0);
  Value* logits = g->add_node("MatMul", {h, w2}, {"logits"})->output(0);
  g->add_output(g->add_node("SoftmaxCrossEntropyLoss", {logits, labels}, {"loss"})->output(0));
  return g;
}

TEST(ReductionGradients, ClassifierEndToEnd) {
  const std::vector<Tensor> inputs{random_f64({5, 6}, 51), make_tensor<int64_t>({5}, {0, 3, 1, 1, 2}),
                                   random_f64({6, 8}, 52), random_f64({8}, 53), random_f64({8}, 54, 0.5, 1.5),
                                   random_f64({8}, 55), random_f64({8, 4}, 56)};
  expect_graph_gradients_match(classifier_graph, inputs, {0, 2, 3, 4, 5, 6});
}

}  // namespace
}  // namespace trainrt
