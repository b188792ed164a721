// Gradient rules of BatchNormalization (normalization_gradients.cc) and of the pooling ops
// (pool_gradients.cc) against f64 finite differences.
#include <gtest/gtest.h>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/error.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::GradCheckOptions;
using testing::random_f64;
using testing::WorstErrors;

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

NodeSpec batch_norm(bool training, int outputs = 1) {
  return NodeSpec{.op = "BatchNormalization",
                  .attrs = {{"epsilon", Attribute::of_float(1e-3f)},
                            {"training_mode", Attribute::of_int(training ? 1 : 0)}},
                  .num_outputs = outputs,
                  .opset = 15};
}

TEST(BatchNormGradients, TrainingModeMatchesFiniteDifferences) {
  WorstErrors worst;
  for (std::vector<int64_t> dims : {std::vector<int64_t>{5, 3}, {2, 3, 4}, {2, 3, 3, 2}, {2, 3, 2, 2, 2}}) {
    const std::vector<Tensor> in{random_f64(dims, 1, -1.0, 2.0), random_f64({3}, 2), random_f64({3}, 3),
                                 random_f64({3}, 4), random_f64({3}, 5, 0.5, 1.5)};
    // Y does not depend on the running stats in training mode: their gradients are zero.
    worst.check(batch_norm(true), in);
  }
}

TEST(BatchNormGradients, EvalModeIsAffineInEveryInput) {
  WorstErrors worst;
  for (std::vector<int64_t> dims : {std::vector<int64_t>{4, 3}, {2, 3, 2, 3}}) {
    const std::vector<Tensor> in{random_f64(dims, 6), random_f64({3}, 7), random_f64({3}, 8), random_f64({3}, 9),
                                 random_f64({3}, 10, 0.5, 1.5)};
    worst.check(batch_norm(false), in);
    worst.check(batch_norm(false), in, GradCheckOptions{.wrt = {0}});  // X only: no dScale or dBias wanted
  }
}

TEST(BatchNormGradients, RunningStatOutputsCarryNoGradient) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 15);
  Value* x = g->add_input("x", DType::kF64, Shape({4, 2}));
  Value* c = g->add_input("c", DType::kF64, Shape({2}));
  Node* bn = g->add_node("BatchNormalization", {x, c, c, c, c}, {"y", "rm", "rv"}, kOnnxDomain, "my_bn");
  bn->set_attr("training_mode", Attribute::of_int(1));
  Node* loss = g->add_node("ReduceSum", {bn->output(1)}, {"loss"});
  loss->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(loss->output(0));
  try {
    build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("my_bn"), std::string::npos) << e.what();
  }
}

TEST(PoolGradients, MaxAndAveragePoolMatchFiniteDifferences) {
  WorstErrors worst;
  struct Variant {
    std::vector<int64_t> x;
    std::map<std::string, Attribute> attrs;
  };
  const std::vector<Variant> variants{
      {{2, 2, 7}, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}}},
      {{1, 2, 6, 7}, {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {{1, 2, 7, 6},
       {{"kernel_shape", ints({2, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", Attribute::of_int(1)},
        {"count_include_pad", Attribute::of_int(1)}, {"pads", ints({1, 0, 0, 1})}}},
      {{1, 1, 6, 6}, {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}}},
      {{1, 2, 5, 5}, {{"kernel_shape", ints({3, 3})}, {"auto_pad", Attribute::of_string("SAME_LOWER")}}},
      {{1, 2, 4, 3, 5}, {{"kernel_shape", ints({2, 2, 3})}, {"strides", ints({2, 1, 2})}}},
  };
  for (const Variant& v : variants) {
    // Distinct values keep every window's maximum away from a tie, where it is not differentiable.
    const Tensor x = random_f64(v.x, 11, -3.0, 3.0);
    worst.check({.op = "MaxPool", .attrs = v.attrs}, {x});
    worst.check({.op = "AveragePool", .attrs = v.attrs}, {x});
  }
  const Tensor x = random_f64({2, 3, 4, 5}, 12);
  worst.check({.op = "GlobalMaxPool"}, {x});
  worst.check({.op = "GlobalAveragePool"}, {x});
  worst.check({.op = "GlobalAveragePool"}, {random_f64({2, 3, 6}, 13)});
}

}  // namespace
}  // namespace trainrt
