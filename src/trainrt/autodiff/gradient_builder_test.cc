// The gradient builder: seeds, accumulation over fan-out, pruning, stops at integers, errors,
// and the forward/backward partition giving the same gradients as the joint graph.
#include "trainrt/autodiff/gradient_builder.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "trainrt/core/testing.h"
#include "trainrt/plan/partition.h"
#include "trainrt/runtime/session.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;
using testing::random_f64;

// loss = ReduceSum((x @ w) * (x @ w) + x @ w): w is used through one MatMul whose output fans out.
std::shared_ptr<Graph> fan_out_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF64, Shape({Dim::symbolic("batch"), 3}));
  Value* w = g->add_initializer("w", random_f64({3, 2}, 11));
  Value* h = g->add_node("MatMul", {x, w}, {"h"})->output(0);
  Value* sq = g->add_node("Mul", {h, h}, {"sq"})->output(0);
  Value* s = g->add_node("Add", {sq, h}, {"s"})->output(0);
  Node* red = g->add_node("ReduceSum", {s}, {"loss"});
  red->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(red->output(0));
  return g;
}

// d loss / d w = x^T (2h + 1), d loss / d x = (2h + 1) w^T
void reference_grads(const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw) {
  int64_t b = x.dim(0);
  dx = Tensor::zeros(DType::kF64, {b, 3});
  dw = Tensor::zeros(DType::kF64, {3, 2});
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double h = 0;
      for (int64_t k = 0; k < 3; ++k) h += x.data<double>()[i * 3 + k] * w.data<double>()[k * 2 + j];
      double dh = 2 * h + 1;
      for (int64_t k = 0; k < 3; ++k) {
        dw.data<double>()[k * 2 + j] += x.data<double>()[i * 3 + k] * dh;
        dx.data<double>()[i * 3 + k] += dh * w.data<double>()[k * 2 + j];
      }
    }
}

TEST(GradientBuilder, AccumulatesFanOutAndMatchesHandDerivedGradients) {
  auto g = fan_out_graph();
  GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"w", "x"}});
  EXPECT_EQ(r.grad_of.at("w"), "w_grad");
  EXPECT_EQ(r.grad_of.at("x"), "x_grad");
  Session session(g);
  Tensor x = random_f64({4, 3}, 12);
  auto out = session.run({x});  // loss, then grads in request order
  Tensor dx, dw;
  reference_grads(x, g->find_value("w")->data, dx, dw);
  expect_close(out[1], dw, 1e-12, 1e-12);
  expect_close(out[2], dx, 1e-12, 1e-12);
}

TEST(GradientBuilder, PrunesBranchesThatReachNothingAndStopsAtIntegers) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF64, Shape({4}));
  Value* y = g->add_node("Relu", {x}, {"y"})->output(0);
  // A branch the loss does not use, through an op that has no gradient rule (a gradient op:
  // TrainRT builds no second-order gradients): must not matter.
  g->set_opset(std::string(kTrainrtDomain), 1);
  g->add_output(g->add_node("ReluGrad", {x, x}, {"unused"}, kTrainrtDomain)->output(0));
  Value* shape = g->add_node("Shape", {y}, {"shape"})->output(0);  // integer: stops gradients
  Node* cast = g->add_node("Cast", {shape}, {"shape_f"});
  cast->set_attr("to", Attribute::of_int(11));
  Value* both = g->add_node("Mul", {y, g->add_node("ReduceSum", {cast->output(0)}, {"n"})->output(0)}, {"both"})->output(0);
  Node* loss = g->add_node("ReduceSum", {both}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  size_t forward_nodes = g->nodes().size();
  // Throws UnsupportedOp if a rule were looked up for the unused branch.
  GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
  EXPECT_EQ(r.forward_nodes.size(), forward_nodes);
  Session session(g);
  auto out = session.run({make_tensor<double>({4}, {-1, 2, -3, 4})});
  // d/dx sum(relu(x) * 4) = 4 * [x > 0]
  expect_close(out.back(), make_tensor<double>({4}, {0, 4, 0, 4}));
}

// ReluGrad (a gradient op: TrainRT builds no second-order gradients) has neither a gradient rule
// nor a non-differentiable registration.
TEST(GradientBuilder, MissingRuleOnThePathNamesOpAndNode) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  g->set_opset(std::string(kTrainrtDomain), 1);
  Value* x = g->add_input("x", DType::kF32, Shape({4}));
  Value* dy = g->add_input("dy", DType::kF32, Shape({4}));
  Node* f = g->add_node("ReluGrad", {dy, x}, {"f"}, kTrainrtDomain, "my_relu_grad");
  Node* loss = g->add_node("ReduceSum", {f->output(0)}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  try {
    build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("my_relu_grad"), std::string::npos) << what;
    EXPECT_NE(what.find("ReluGrad"), std::string::npos) << what;
  }
}

TEST(GradientBuilder, UnreachedValuesGetZeroGradients) {
  auto g = fan_out_graph();
  g->add_initializer("unused_w", random_f64({5}, 3));
  GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"w", "unused_w"}});
  EXPECT_EQ(r.unreached, std::vector<std::string>{"unused_w"});
  Session session(g);
  auto out = session.run({random_f64({2, 3}, 4)});
  expect_close(out[2], Tensor::zeros(DType::kF64, {5}));
}

// Nothing to differentiate (a module whose outputs are all integers): every wrt entry is unreached,
// and the partition gives a backward that saves nothing.
TEST(GradientBuilder, AnEmptyRequestLeavesEveryValueUnreached) {
  auto g = fan_out_graph();
  GradientResult r = build_gradients(*g, {.wrt = {"w", "x"}});
  EXPECT_EQ(r.unreached, (std::vector<std::string>{"w", "x"}));
  EXPECT_TRUE(r.output_grad_inputs.empty());
  TrainingPrograms p = partition_joint_graph(*g, r);
  EXPECT_TRUE(p.saved.empty());
}

TEST(Partition, ForwardAndBackwardProgramsGiveTheJointGraphsGradients) {
  auto g = fan_out_graph();
  GradientRequest request{.outputs_with_grad = {"loss"}, .wrt = {"w", "x"}};
  GradientResult r = build_gradients(*g, request);
  TrainingPrograms p = partition_joint_graph(*g, r);
  ASSERT_EQ(r.output_grad_inputs.size(), 1u);

  Tensor x = random_f64({5, 3}, 21);
  Session forward(p.forward);
  auto fwd = forward.run({x});
  ASSERT_EQ(fwd.size(), 1 + p.saved.size());
  std::map<std::string, Tensor> by_name{{"x", x}, {r.output_grad_inputs[0], Tensor::scalar<double>(1.0)}};
  for (size_t i = 0; i < p.saved.size(); ++i) by_name[p.saved[i]] = fwd[1 + i];
  by_name["loss"] = fwd[0];
  std::vector<Tensor> bwd_inputs;
  for (const std::string& name : p.backward_inputs) bwd_inputs.push_back(by_name.at(name));
  Session backward(p.backward);
  auto grads = backward.run(bwd_inputs);  // grad_of order: w, x

  Tensor dx, dw;
  reference_grads(x, g->find_value("w")->data, dx, dw);
  expect_close(grads[0], dw, 1e-12, 1e-12);
  expect_close(grads[1], dx, 1e-12, 1e-12);
}

// A forward node whose value nothing reads (a forward copy the saved-values choice replaced by a
// recompute in the backward) is left out of the forward program; what the outputs need stays.
TEST(Partition, TheForwardLeavesOutNodesNothingReads) {
  auto g = fan_out_graph();
  GradientResult r = build_gradients(*g, {.outputs_with_grad = {"loss"}, .wrt = {"w", "x"}});
  Node* unread = g->add_node("Neg", {g->find_value("sq")}, {"unread"});
  r.forward_nodes.push_back(unread);
  TrainingPrograms p = partition_joint_graph(*g, r);
  std::vector<std::string> ops;
  for (const Node* n : p.forward->nodes()) ops.push_back(n->op_type());
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Neg"), 0);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "MatMul"), 1);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "ReduceSum"), 1);
  EXPECT_EQ(p.forward->find_value("unread"), nullptr);
}

TEST(GradientCheck, MatMulAndGemmAgreeWithFiniteDifferences) {
  using testing::expect_gradients_match;
  expect_gradients_match({.op = "MatMul"}, {random_f64({3, 4}, 1), random_f64({4, 5}, 2)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({2, 3, 4}, 3), random_f64({4, 2}, 4)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({2, 1, 3, 4}, 5), random_f64({3, 4, 2}, 6)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({4}, 7), random_f64({2, 4, 3}, 8)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({2, 3, 4}, 9), random_f64({4}, 10)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({4}, 14), random_f64({4}, 15)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({3, 4}, 16), random_f64({2, 4, 5}, 17)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({2, 3, 4}, 18), random_f64({2, 4, 5}, 19)});
  expect_gradients_match({.op = "MatMul"}, {random_f64({4}, 20), random_f64({4, 3}, 21)});
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      NodeSpec spec{.op = "Gemm",
                    .attrs = {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)},
                              {"alpha", Attribute::of_float(0.5f)}, {"beta", Attribute::of_float(2.f)}}};
      Tensor a = ta ? random_f64({4, 3}, 11) : random_f64({3, 4}, 11);
      Tensor b = tb ? random_f64({5, 4}, 12) : random_f64({4, 5}, 12);
      expect_gradients_match(spec, {a, b, random_f64({5}, 13)});
    }
  // FusedMatMul in every transpose combination, batched against a 2-D weight and batch-broadcast.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      NodeSpec spec{.op = "FusedMatMul",
                    .attrs = {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)},
                              {"alpha", Attribute::of_float(0.5f)}},
                    .domain = std::string(kTrainrtDomain)};
      Tensor a = ta ? random_f64({2, 4, 3}, 14) : random_f64({2, 3, 4}, 14);
      expect_gradients_match(spec, {a, tb ? random_f64({5, 4}, 15) : random_f64({4, 5}, 15)});
      expect_gradients_match(spec, {a, tb ? random_f64({1, 5, 4}, 16) : random_f64({1, 4, 5}, 16)});
      // With a bias (5) added to every row (passes/matmul_bias_fusion.h): dBias sums dY's rows.
      expect_gradients_match(spec, {a, tb ? random_f64({5, 4}, 15) : random_f64({4, 5}, 15), random_f64({5}, 17)});
    }
}

}  // namespace
}  // namespace trainrt
