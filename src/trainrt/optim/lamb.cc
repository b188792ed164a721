#include "trainrt/optim/lamb.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/optim/f32_blocks.h"
#include "trainrt/optim/optim_math.h"
#include "trainrt/optim/param_checks.h"

namespace trainrt {

namespace {

constexpr std::string_view kCaller = "lamb_step";

// The kernel's coefficients for a parameter about to take step t (t >= 1); bias corrections in
// double, then rounded once, as Apex computes them on the host.
LambCoefficients coefficients_for(const LambOptions& o, int64_t t, float grad_scale) {
  LambCoefficients c{};
  c.grad_scale = grad_scale;
  c.l2 = o.adam_w_mode ? 0.f : static_cast<float>(o.weight_decay);
  c.decoupled = o.adam_w_mode ? static_cast<float>(o.weight_decay) : 0.f;
  c.beta1 = static_cast<float>(o.beta1);
  c.beta1_weight = static_cast<float>(1 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1 - o.beta2);
  c.bias_correction1 = o.bias_correction ? static_cast<float>(1 - std::pow(o.beta1, static_cast<double>(t))) : 1.f;
  c.bias_correction2 = o.bias_correction ? static_cast<float>(1 - std::pow(o.beta2, static_cast<double>(t))) : 1.f;
  c.eps = static_cast<float>(o.eps);
  return c;
}

// -lr * ||p|| / ||u||, or -lr when either norm is 0 or the trust ratio is off (Apex's stage 2).
float negative_step(const LambOptions& o, const LambSums& sums) {
  const bool trust = o.use_nvlamb || o.weight_decay != 0;
  if (!trust || sums.param_sq == 0 || sums.update_sq == 0) return static_cast<float>(-o.lr);
  return static_cast<float>(-o.lr * std::sqrt(sums.param_sq) / std::sqrt(sums.update_sq));
}

}  // namespace

void validate(const LambOptions& o) {
  auto check = [](bool ok, std::string_view what, double value) {
    if (!ok) throw InvalidModel(fmt(kCaller, ": invalid ", what, " ", value));
  };
  check(o.lr >= 0, "lr", o.lr);
  check(o.eps >= 0, "eps", o.eps);
  check(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2);
  check(o.weight_decay >= 0, "weight_decay", o.weight_decay);
}

void lamb_step(std::span<const ParamSlot> slots, const LambOptions& options, float grad_scale) {
  validate(options);
  const StateBufferUse moments[] = {{&OptimizerState::exp_avg, "exp_avg"},
                                    {&OptimizerState::exp_avg_sq, "exp_avg_sq"}};
  // Per slot or per segment, storage kept from step to step. Named references: inside the pool's
  // loops a thread_local's name would mean each worker's own (empty) vector.
  thread_local std::vector<LambCoefficients> kept_coefficients;
  thread_local std::vector<LambSums> kept_segment_sums, kept_param_sums;
  thread_local std::vector<float> kept_neg_steps;
  std::vector<LambCoefficients>& coefficients = kept_coefficients;
  std::vector<LambSums>& segment_sums = kept_segment_sums;
  std::vector<LambSums>& param_sums = kept_param_sums;
  std::vector<float>& neg_steps = kept_neg_steps;
  prepare_moment_step(slots, kCaller, moments, [&](int64_t t) { return coefficients_for(options, t, grad_scale); },
                      coefficients);

  // Pass 1: moments, and the squared norms of p and u per segment (summed per parameter below, in
  // segment order, so the result does not depend on thread timing).
  const MultiTensorPlan& plan = slot_plan(slots, PlanOver::kParams);
  segment_sums.assign(static_cast<size_t>(plan.num_segments()), LambSums{});
  plan.run([&](int64_t, const TensorSegment& seg) {
    const ParamSlot& s = slots[static_cast<size_t>(seg.tensor)];
    const LambCoefficients& c = coefficients[static_cast<size_t>(seg.tensor)];
    LambSums& sums = segment_sums[static_cast<size_t>(plan.index_of(seg))];
    // Block by block, also for f32, so that lamb_norms reads what lamb_moments wrote from L1.
    visit_param_dtype(s.param.dtype(), [&]<typename T>() {
      for (int64_t b = seg.begin; b < seg.end; b += kF32BlockElements) {
        const std::array<T*, 4> arrays{s.param.data<T>() + b, s.grad.data<T>() + b, s.state.exp_avg.data<T>() + b,
                                       s.state.exp_avg_sq.data<T>() + b};
        with_f32_blocks<T>(std::min(kF32BlockElements, seg.end - b), arrays, {false, false, true, true},
                           [&](const std::array<float*, 4>& a, int64_t n) {
                             lamb_moments(a[0], a[1], a[2], a[3], n, c);
                             round_to_storage<T>(a[2], n);  // u from the moments as stored
                             round_to_storage<T>(a[3], n);
                             const LambSums block = lamb_norms(a[0], a[2], a[3], n, c);
                             sums.param_sq += block.param_sq;
                             sums.update_sq += block.update_sq;
                           });
      }
    });
  });

  param_sums.assign(slots.size(), LambSums{});
  for (int64_t i = 0; i < plan.num_segments(); ++i) {
    LambSums& total = param_sums[static_cast<size_t>(plan.segment(i).tensor)];
    total.param_sq += segment_sums[static_cast<size_t>(i)].param_sq;
    total.update_sq += segment_sums[static_cast<size_t>(i)].update_sq;
  }
  neg_steps.clear();
  for (const LambSums& sums : param_sums) neg_steps.push_back(negative_step(options, sums));

  // Pass 2: p = p - lr * ratio * u, u recomputed from the stored moments.
  plan.run([&](int64_t, const TensorSegment& seg) {
    const ParamSlot& s = slots[static_cast<size_t>(seg.tensor)];
    const LambCoefficients& c = coefficients[static_cast<size_t>(seg.tensor)];
    const float neg_step = neg_steps[static_cast<size_t>(seg.tensor)];
    const int64_t b = seg.begin;
    visit_param_dtype(s.param.dtype(), [&]<typename T>() {
      const std::array<T*, 3> arrays{s.param.data<T>() + b, s.state.exp_avg.data<T>() + b,
                                     s.state.exp_avg_sq.data<T>() + b};
      with_f32_blocks<T>(seg.end - b, arrays, {true, false, false}, [&](const std::array<float*, 3>& a, int64_t n) {
        lamb_apply(a[0], a[1], a[2], n, c, neg_step);
      });
    });
  });
  for (const ParamSlot& s : slots) ++s.state.step;
}

}  // namespace trainrt
