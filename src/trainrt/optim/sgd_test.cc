#include "trainrt/optim/sgd.h"

#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/optim/optim_testing.h"

namespace trainrt {
namespace {

using testing::checked_at;
using testing::expect_close_to;
using testing::kReferenceShapes;
using testing::load_tracked;
using testing::OptimProblem;
using testing::to_doubles;
using testing::Tracked;

// One torch.optim.SGD step (torch/optim/sgd.py, _single_tensor_sgd) for one parameter, in double,
// from the f32 state the engine held before the step; `first` when the momentum buffer did not exist.
void reference_step(std::vector<Tracked>& p, std::vector<Tracked>& buf, bool first, const Tensor& grad,
                    const SgdOptions& o) {
  for (size_t i = 0; i < p.size(); ++i) {
    const Tracked g(grad.to_double(static_cast<int64_t>(i)));
    Tracked gi = o.maximize ? -g : g;
    if (o.weight_decay != 0) gi = gi + o.weight_decay * p[i];
    if (o.momentum != 0) {
      buf[i] = first ? gi : o.momentum * buf[i] + (1 - o.dampening) * gi;
      gi = o.nesterov ? gi + o.momentum * buf[i] : buf[i];
    }
    p[i] = p[i] - o.lr * gi;
  }
}

// Runs 100 steps of sgd_step on all reference shapes, one call per step, and checks every step
// of every parameter (of the 1M-element one: steps 1-3 and every 25th) against one reference
// step from the same starting state. (Comparing whole
// trajectories instead would measure how f32 storage rounding drifts, not the step: two f32
// trajectories that differ by one rounding keep that difference.)
void check_against_reference(const SgdOptions& options, DType dtype = DType::kF32) {
  OptimProblem problem(kReferenceShapes, 7, dtype);
  const std::vector<ParamSlot> slots = problem.slots();
  std::vector<std::vector<Tracked>> p(slots.size()), buf(slots.size());
  std::vector<char> first(slots.size());
  double worst = 0;
  for (int step = 1; step <= 100; ++step) {
    problem.fill_grads(step);
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!checked_at(step, problem.params[i])) continue;
      const int64_t n = problem.params[i].numel();
      load_tracked(p[i], problem.params[i], n);
      load_tracked(buf[i], problem.states[i].momentum_buffer, n);
      first[i] = !problem.states[i].momentum_buffer.defined();
    }
    sgd_step(slots, options);
    for (size_t i = 0; i < slots.size(); ++i) {
      EXPECT_EQ(problem.states[i].step, step);
      if (!checked_at(step, problem.params[i])) continue;
      reference_step(p[i], buf[i], first[i], problem.grads[i], options);
      const std::string where = problem.names[i] + " step " + std::to_string(step);
      worst = std::max(worst, expect_close_to(problem.params[i], p[i], 1e-6, where + " param"));
      if (options.momentum != 0)
        worst = std::max(worst, expect_close_to(problem.states[i].momentum_buffer, buf[i], 1e-6,
                                                where + " momentum_buffer"));
    }
    if (::testing::Test::HasFailure()) break;
  }
  ::testing::Test::RecordProperty("max_relative_error", fmt(worst));
}

TEST(SgdTest, PlainMatchesReference) {
  SgdOptions o;
  o.lr = 0.05;
  check_against_reference(o);
}

TEST(SgdTest, MomentumMatchesReference) {
  SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  check_against_reference(o);
}

TEST(SgdTest, MomentumDampeningWeightDecayMatchesReference) {
  SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.8;
  o.dampening = 0.3;
  o.weight_decay = 0.05;
  check_against_reference(o);
}

TEST(SgdTest, NesterovMatchesReference) {
  SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-3;
  check_against_reference(o);
}

TEST(SgdTest, MaximizeWithWeightDecayMatchesReference) {
  SgdOptions o;
  o.lr = 0.02;
  o.momentum = 0.5;
  o.weight_decay = 0.1;
  o.maximize = true;
  check_against_reference(o);
}

TEST(SgdTest, FirstStepCopiesGradientIntoMomentumBuffer) {
  OptimProblem problem({{5}}, 3);
  problem.fill_grads(1);
  SgdOptions o;
  o.momentum = 0.9;
  o.dampening = 0.5;  // torch ignores dampening on the first step
  sgd_step(problem.slots(), o);
  ASSERT_TRUE(problem.states[0].momentum_buffer.defined());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(problem.states[0].momentum_buffer.data<float>()[i], problem.grads[0].data<float>()[i]);
}

TEST(SgdTest, GradScaleEqualsScaledGradients) {
  OptimProblem fused({{100}, {37}}, 5), scaled({{100}, {37}}, 5);
  SgdOptions o;
  o.momentum = 0.9;
  for (int step = 1; step <= 3; ++step) {
    fused.fill_grads(step);
    scaled.fill_grads(step);
    for (Tensor& g : scaled.grads)
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= 0.25f;
    sgd_step(fused.slots(), o, 0.25f);
    sgd_step(scaled.slots(), o);
  }
  for (size_t i = 0; i < fused.params.size(); ++i)
    expect_close_to(fused.params[i], to_doubles(scaled.params[i]), 1e-7, fused.names[i]);
}

// 16-bit parameters and momentum buffers: f32 math, each stored value rounded once to nearest even
// (half an ulp of the dtype allowed, no more), as torch.optim.SGD(fused=True) computes.
TEST(SgdTest, Bf16AndF16ComputeInF32AndRoundOnStore) {
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.01;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    check_against_reference(o, dtype);
  }
}

TEST(SgdTest, BadSlotThrowsBeforeAnyUpdate) {
  OptimProblem problem({{4}, {3}}, 1);
  problem.fill_grads(1);
  const std::vector<double> before = to_doubles(problem.params[0]);
  problem.grads[1] = Tensor::zeros(DType::kF32, {4});
  SgdOptions o;
  o.momentum = 0.9;
  try {
    sgd_step(problem.slots(), o);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'p1'"), std::string::npos) << e.what();
  }
  expect_close_to(problem.params[0], before, 0, "untouched param");
  EXPECT_FALSE(problem.states[0].momentum_buffer.defined());
  EXPECT_EQ(problem.states[0].step, 0);
}

TEST(SgdTest, UnsupportedDtypeNamesParameter) {
  Tensor p = Tensor::zeros(DType::kI32, {3}), g = Tensor::zeros(DType::kI32, {3});
  OptimizerState s;
  std::vector<ParamSlot> slots{{"emb.weight", p, g, s}};
  try {
    sgd_step(slots, SgdOptions{});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("'emb.weight' is i32(3)"), std::string::npos) << e.what();
  }
}

TEST(SgdTest, InvalidOptionsThrow) {
  SgdOptions o;
  o.lr = -1;
  EXPECT_THROW(validate(o), InvalidModel);
  o = SgdOptions{};
  o.nesterov = true;  // needs momentum
  EXPECT_THROW(validate(o), InvalidModel);
  o.momentum = 0.9;
  EXPECT_NO_THROW(validate(o));
}

}  // namespace
}  // namespace trainrt
