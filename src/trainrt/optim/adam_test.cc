#include "trainrt/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/optim/grad_ops.h"
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

// The f32 state of one parameter, as the reference computes it.
struct AdamState {
  std::vector<Tracked> p, m, v, v_max;
};

// Loads the engine's state before a step; buffers not created yet are zeros, as the step creates them.
void load_state(AdamState& out, const Tensor& param, const OptimizerState& s) {
  const int64_t n = param.numel();
  load_tracked(out.p, param, n);
  load_tracked(out.m, s.exp_avg, n);
  load_tracked(out.v, s.exp_avg_sq, n);
  load_tracked(out.v_max, s.max_exp_avg_sq, n);
}

// One step t of the three Adam conventions for one parameter, in double, from the f32 state the
// engine held before the step; written from the sources (torch.optim.Adam / AdamW docs and
// torch/optim/adam.py; transformers' AdamW.step).
void reference_step(AdamState& s, int64_t t, const Tensor& grad, const AdamOptions& o, double grad_scale) {
  const double bc1 = o.bias_correction ? 1 - std::pow(o.beta1, double(t)) : 1.0;
  const double bc2 = o.bias_correction ? 1 - std::pow(o.beta2, double(t)) : 1.0;
  for (size_t i = 0; i < s.p.size(); ++i) {
    Tracked gi = Tracked(grad.to_double(static_cast<int64_t>(i))) * grad_scale;
    Tracked& p = s.p[i];
    if (o.mode == WeightDecayMode::kL2) gi = gi + o.weight_decay * p;
    if (o.mode == WeightDecayMode::kDecoupled) p = p * (1 - o.lr * o.weight_decay);
    s.m[i] = o.beta1 * s.m[i] + (1 - o.beta1) * gi;
    s.v[i] = o.beta2 * s.v[i] + (1 - o.beta2) * gi * gi;
    if (o.amsgrad) s.v_max[i] = max(s.v_max[i], s.v[i]);
    const Tracked vd = o.amsgrad ? s.v_max[i] : s.v[i];
    if (o.mode == WeightDecayMode::kHuggingFace) {
      p = p - o.lr * std::sqrt(bc2) / bc1 * s.m[i] / (sqrt(vd) + o.eps);
      p = p - o.lr * o.weight_decay * p;
    } else {
      p = p - o.lr / bc1 * s.m[i] / (sqrt(vd) / std::sqrt(bc2) + o.eps);
    }
  }
}

// Runs 100 steps of adam_step on all reference shapes stored as `dtype`, one call per step, and
// checks every step of every parameter (of the 1M-element one: steps 1-3 and every 25th) against one reference
// step from the same starting state. (Comparing whole
// trajectories instead would measure how f32 storage rounding drifts, not the step.)
void check_against_reference(const AdamOptions& options, float grad_scale = 1.f, DType dtype = DType::kF32) {
  OptimProblem problem(kReferenceShapes, 11, dtype);
  const std::vector<ParamSlot> slots = problem.slots();
  std::vector<AdamState> expected(slots.size());
  double worst = 0;
  for (int step = 1; step <= 100; ++step) {
    problem.fill_grads(step);
    for (size_t i = 0; i < slots.size(); ++i)
      if (checked_at(step, problem.params[i])) load_state(expected[i], problem.params[i], problem.states[i]);
    adam_step(slots, options, grad_scale);
    for (size_t i = 0; i < slots.size(); ++i) {
      const OptimizerState& s = problem.states[i];
      EXPECT_EQ(s.step, step);
      if (!checked_at(step, problem.params[i])) continue;
      AdamState& e = expected[i];
      reference_step(e, step, problem.grads[i], options, grad_scale);
      const std::string where = problem.names[i] + " step " + std::to_string(step);
      worst = std::max(worst, expect_close_to(problem.params[i], e.p, 1e-6, where + " param"));
      worst = std::max(worst, expect_close_to(s.exp_avg, e.m, 1e-6, where + " exp_avg"));
      worst = std::max(worst, expect_close_to(s.exp_avg_sq, e.v, 1e-6, where + " exp_avg_sq"));
      if (options.amsgrad)
        worst = std::max(worst, expect_close_to(s.max_exp_avg_sq, e.v_max, 1e-6, where + " max_exp_avg_sq"));
      EXPECT_EQ(s.max_exp_avg_sq.defined(), options.amsgrad);
    }
    if (::testing::Test::HasFailure()) break;
  }
  ::testing::Test::RecordProperty("max_relative_error", fmt(worst));
}

AdamOptions with(WeightDecayMode mode, double weight_decay, bool amsgrad = false) {
  AdamOptions o;
  o.mode = mode;
  o.weight_decay = weight_decay;
  o.amsgrad = amsgrad;
  return o;
}

TEST(AdamTest, DefaultsAreTorchDefaults) {
  const AdamOptions adam, adamw = AdamOptions::adamw();
  EXPECT_EQ(adam.lr, 1e-3);
  EXPECT_EQ(adam.beta1, 0.9);
  EXPECT_EQ(adam.beta2, 0.999);
  EXPECT_EQ(adam.eps, 1e-8);
  EXPECT_EQ(adam.weight_decay, 0);
  EXPECT_EQ(adam.mode, WeightDecayMode::kL2);
  EXPECT_TRUE(adam.bias_correction);
  EXPECT_EQ(adamw.weight_decay, 1e-2);
  EXPECT_EQ(adamw.mode, WeightDecayMode::kDecoupled);
}

TEST(AdamTest, AdamMatchesReference) { check_against_reference(AdamOptions{}); }

TEST(AdamTest, AdamL2WeightDecayMatchesReference) { check_against_reference(with(WeightDecayMode::kL2, 0.1)); }

TEST(AdamTest, AdamWMatchesReference) {
  AdamOptions o = AdamOptions::adamw();
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  check_against_reference(o);
}

TEST(AdamTest, HuggingFaceAdamWMatchesReference) {
  AdamOptions o = with(WeightDecayMode::kHuggingFace, 0.1);
  o.lr = 1e-2;
  o.eps = 1e-6;
  check_against_reference(o);
}

TEST(AdamTest, AmsgradMatchesReferenceInEveryMode) {
  for (WeightDecayMode mode : {WeightDecayMode::kL2, WeightDecayMode::kDecoupled, WeightDecayMode::kHuggingFace}) {
    SCOPED_TRACE(static_cast<int>(mode));
    check_against_reference(with(mode, 0.01, /*amsgrad=*/true));
  }
}

TEST(AdamTest, WithoutBiasCorrectionMatchesReferenceInEveryMode) {
  for (WeightDecayMode mode : {WeightDecayMode::kL2, WeightDecayMode::kDecoupled, WeightDecayMode::kHuggingFace}) {
    SCOPED_TRACE(static_cast<int>(mode));
    AdamOptions o = with(mode, 0.01);
    o.bias_correction = false;
    check_against_reference(o);
  }
}

TEST(AdamTest, GradScaleAndBetasMatchReference) {
  AdamOptions o = AdamOptions::adamw();
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  check_against_reference(o, /*grad_scale=*/0.3f);
}

TEST(AdamTest, TinyGradientsWhereEpsDominatesMatchReference) {
  // Gradients of 1e-13 .. 3e-9: sqrt(v_hat) is at or below eps, so the eps term decides the step.
  check_against_reference(AdamOptions::adamw(), /*grad_scale=*/1e-9f);
  AdamOptions hf = with(WeightDecayMode::kHuggingFace, 0.01);
  check_against_reference(hf, /*grad_scale=*/1e-9f);
}

TEST(AdamTest, FusedClipMatchesClipThenStep) {
  OptimProblem fused({{1000}, {7, 9}}, 2), clipped({{1000}, {7, 9}}, 2);
  const AdamOptions o = AdamOptions::adamw();
  for (int step = 1; step <= 5; ++step) {
    fused.fill_grads(step);
    clipped.fill_grads(step);
    const std::vector<ParamSlot> fs = fused.slots(), cs = clipped.slots();
    adam_step(fs, o, clip_scale(grad_norm(fs), 1e-3));
    clip_grad_norm(cs, 1e-3);
    adam_step(cs, o);
  }
  for (size_t i = 0; i < fused.params.size(); ++i)
    expect_close_to(fused.params[i], to_doubles(clipped.params[i]), 1e-6, fused.names[i]);
}

// 16-bit parameters: state in the parameter's dtype, math in f32 on the widened values, each stored
// value the f32 result rounded to nearest even (expect_close_to allows half an ulp of the dtype and
// no more, so truncation or a double rounding fails), as torch.optim.AdamW(fused=True) computes.
TEST(AdamTest, Bf16AndF16ComputeInF32AndRoundOnStore) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    check_against_reference(AdamOptions::adamw(), 1.f, dtype);
    check_against_reference(with(WeightDecayMode::kL2, 0.1, /*amsgrad=*/true), 0.5f, dtype);
  }
}

TEST(AdamTest, LoadedStateWithWrongShapeThrowsNamingBuffer) {
  OptimProblem problem({{4}}, 1);
  problem.states[0].exp_avg = Tensor::zeros(DType::kF32, {5});
  try {
    adam_step(problem.slots(), AdamOptions{});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("state 'exp_avg' of parameter 'p0'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(problem.states[0].exp_avg_sq.defined());  // nothing allocated by the failed call
}

TEST(AdamTest, UnsupportedDtypeNamesParameter) {
  Tensor p = Tensor::zeros(DType::kF64, {2, 2}), g = Tensor::zeros(DType::kF64, {2, 2});
  OptimizerState s;
  std::vector<ParamSlot> slots{{"ln.bias", p, g, s}};
  try {
    adam_step(slots, AdamOptions{});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("'ln.bias' is f64(2, 2)"), std::string::npos) << e.what();
  }
}

TEST(AdamTest, InvalidOptionsThrow) {
  AdamOptions o;
  o.beta2 = 1.0;
  EXPECT_THROW(validate(o), InvalidModel);
  o = AdamOptions{};
  o.eps = -1;
  EXPECT_THROW(validate(o), InvalidModel);
}

}  // namespace
}  // namespace trainrt
