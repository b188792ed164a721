#include "trainrt/optim/lamb.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/optim/optim_testing.h"

namespace trainrt {
namespace {

using testing::checked_at;
using testing::expect_close_to;
using testing::kReferenceShapes;
using testing::load_tracked;
using testing::OptimProblem;
using testing::Tracked;

// The state of one parameter, as the reference computes it.
struct LambState {
  std::vector<Tracked> p, m, v;
};

void load_state(LambState& out, const Tensor& param, const OptimizerState& s) {
  const int64_t n = param.numel();
  load_tracked(out.p, param, n);
  load_tracked(out.m, s.exp_avg, n);
  load_tracked(out.v, s.exp_avg_sq, n);
}

// x as stored in `dtype`: 16-bit moments are rounded before u is computed from them (lamb.h).
Tracked stored(Tracked x, DType dtype) {
  const float f = static_cast<float>(x.value);
  if (dtype == DType::kBF16) return {bf16_to_f32(f32_to_bf16(f)), x.magnitude};
  if (dtype == DType::kF16) return {f16_to_f32(f32_to_f16(f)), x.magnitude};
  return x;
}

// One LAMB step t on one parameter, in double, from the state the engine held before the step,
// written from Apex (apex/optimizers/fused_lamb.py, csrc/multi_tensor_lamb.cu stages 1 and 2).
// Returns the trust ratio used.
double reference_step(LambState& s, int64_t t, const Tensor& grad, const LambOptions& o, double grad_scale) {
  const double bc1 = o.bias_correction ? 1 - std::pow(o.beta1, double(t)) : 1.0;
  const double bc2 = o.bias_correction ? 1 - std::pow(o.beta2, double(t)) : 1.0;
  std::vector<Tracked> u(s.p.size());
  double p_sq = 0, u_sq = 0;
  for (size_t i = 0; i < s.p.size(); ++i) {
    Tracked g = Tracked(grad.to_double(static_cast<int64_t>(i))) * grad_scale;
    if (!o.adam_w_mode) g = g + o.weight_decay * s.p[i];
    s.m[i] = o.beta1 * s.m[i] + (1 - o.beta1) * g;
    s.v[i] = o.beta2 * s.v[i] + (1 - o.beta2) * g * g;
    u[i] = (stored(s.m[i], grad.dtype()) / bc1) / (sqrt(stored(s.v[i], grad.dtype()) / bc2) + o.eps);
    if (o.adam_w_mode) u[i] = u[i] + o.weight_decay * s.p[i];
    p_sq += s.p[i].value * s.p[i].value;
    u_sq += u[i].value * u[i].value;
  }
  const bool trust = o.use_nvlamb || o.weight_decay != 0;
  const double ratio = trust && p_sq > 0 && u_sq > 0 ? std::sqrt(p_sq) / std::sqrt(u_sq) : 1.0;
  for (size_t i = 0; i < s.p.size(); ++i) s.p[i] = s.p[i] - (o.lr * ratio) * u[i];
  return ratio;
}

// 100 steps of lamb_step on all reference shapes (one call per step), each step of each parameter
// checked against one reference step from the same starting state (as adam_test.cc does).
// rtol_param: for 16-bit storage a moment that rounds the other way than in the reference moves
// u by up to an ulp of the dtype, so the parameter is held to that, relative to its magnitude.
void check_against_reference(const LambOptions& options, float grad_scale = 1.f, DType dtype = DType::kF32,
                             double rtol_param = 1e-6) {
  OptimProblem problem(kReferenceShapes, 21, dtype);
  const std::vector<ParamSlot> slots = problem.slots();
  std::vector<LambState> expected(slots.size());
  int ratios_not_one = 0;
  for (int step = 1; step <= 100; ++step) {
    problem.fill_grads(step);
    for (size_t i = 0; i < slots.size(); ++i)
      if (checked_at(step, problem.params[i])) load_state(expected[i], problem.params[i], problem.states[i]);
    lamb_step(slots, options, grad_scale);
    for (size_t i = 0; i < slots.size(); ++i) {
      const OptimizerState& s = problem.states[i];
      EXPECT_EQ(s.step, step);
      EXPECT_EQ(s.exp_avg.dtype(), dtype);
      if (!checked_at(step, problem.params[i])) continue;
      LambState& e = expected[i];
      ratios_not_one += reference_step(e, step, problem.grads[i], options, grad_scale) != 1.0;
      const std::string where = problem.names[i] + " step " + std::to_string(step);
      expect_close_to(problem.params[i], e.p, rtol_param, where + " param");
      expect_close_to(s.exp_avg, e.m, 1e-6, where + " exp_avg");
      expect_close_to(s.exp_avg_sq, e.v, 1e-6, where + " exp_avg_sq");
    }
    if (::testing::Test::HasFailure()) break;
  }
  // The trust ratio was exercised exactly when it applies.
  const bool trust = options.use_nvlamb || options.weight_decay != 0;
  EXPECT_EQ(ratios_not_one > 0, trust);
}

LambOptions with(bool adam_w_mode, double weight_decay) {
  LambOptions o;
  o.lr = 1e-2;
  o.adam_w_mode = adam_w_mode;
  o.weight_decay = weight_decay;
  return o;
}

TEST(LambTest, DefaultsAreApexDefaults) {
  const LambOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.beta1, 0.9);
  EXPECT_EQ(o.beta2, 0.999);
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.weight_decay, 0.01);
  EXPECT_TRUE(o.bias_correction);
  EXPECT_TRUE(o.adam_w_mode);
  EXPECT_FALSE(o.use_nvlamb);
}

TEST(LambTest, DecoupledDecayMatchesReference) { check_against_reference(with(true, 0.01)); }

TEST(LambTest, L2DecayMatchesReference) { check_against_reference(with(false, 0.1)); }

TEST(LambTest, NoDecayTakesNoTrustRatio) { check_against_reference(with(true, 0.0)); }

TEST(LambTest, NvLambTakesTrustRatioWithoutDecay) {
  LambOptions o = with(true, 0.0);
  o.use_nvlamb = true;
  check_against_reference(o);
}

TEST(LambTest, WithoutBiasCorrectionAndOtherBetasMatchesReference) {
  LambOptions o = with(true, 0.05);
  o.bias_correction = false;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-4;
  check_against_reference(o);
}

TEST(LambTest, GradScaleIsFoldedIn) { check_against_reference(with(true, 0.01), 0.25f); }

TEST(LambTest, Bf16MatchesReferenceWithMomentsInBf16) {
  check_against_reference(with(true, 0.01), 1.f, DType::kBF16, 1.0 / 128);  // one bf16 ulp
}

TEST(LambTest, F16MatchesReferenceWithMomentsInF16) {
  check_against_reference(with(false, 0.1), 1.f, DType::kF16, 1.0 / 1024);  // one f16 ulp
}

// ||p|| = 0 (a zero-initialized bias) and ||u|| = 0 (nothing to do) take ratio 1, without NaN.
TEST(LambTest, ZeroNormsTakeRatioOne) {
  OptimProblem problem({{5}, {3}}, 2);
  for (int64_t j = 0; j < 5; ++j) {
    problem.params[0].data<float>()[j] = 0.f;
    problem.grads[0].data<float>()[j] = 1.f;
  }
  for (int64_t j = 0; j < 3; ++j) {
    problem.params[1].data<float>()[j] = 0.f;
    problem.grads[1].data<float>()[j] = 0.f;
  }
  LambOptions o = with(true, 0.01);
  lamb_step(problem.slots(), o);
  // Step 1 with bias correction: m / bc1 = g and v / bc2 = g^2, so u = 1 / (1 + eps).
  for (int64_t j = 0; j < 5; ++j) EXPECT_FLOAT_EQ(problem.params[0].data<float>()[j], -o.lr / (1 + o.eps));
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(problem.params[1].data<float>()[j], 0.f);
}

TEST(LambTest, BadSlotThrowsBeforeAnyUpdate) {
  OptimProblem problem({{4}, {3}}, 1);
  problem.fill_grads(1);
  const std::vector<double> before = testing::to_doubles(problem.params[0]);
  problem.grads[1] = Tensor::zeros(DType::kBF16, {3});
  try {
    lamb_step(problem.slots(), LambOptions{});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("gradient of parameter 'p1' is bf16(3)"), std::string::npos) << e.what();
  }
  testing::expect_close_to(problem.params[0], before, 0, "untouched param");
  EXPECT_FALSE(problem.states[0].exp_avg.defined());
  EXPECT_EQ(problem.states[0].step, 0);
}

TEST(LambTest, UnsupportedDtypeNamesParameter) {
  Tensor p = Tensor::zeros(DType::kF64, {2}), g = Tensor::zeros(DType::kF64, {2});
  OptimizerState s;
  std::vector<ParamSlot> slots{{"head.weight", p, g, s}};
  try {
    lamb_step(slots, LambOptions{});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("'head.weight' is f64(2)"), std::string::npos) << e.what();
  }
}

TEST(LambTest, InvalidOptionsThrow) {
  LambOptions o;
  o.beta1 = 1.0;
  EXPECT_THROW(validate(o), InvalidModel);
  o = LambOptions{};
  o.weight_decay = -1;
  EXPECT_THROW(validate(o), InvalidModel);
}

}  // namespace
}  // namespace trainrt
