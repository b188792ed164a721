#include "trainrt/optim/adam.h"

#include <array>
#include <cmath>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/optim/f32_blocks.h"
#include "trainrt/optim/optim_math.h"
#include "trainrt/optim/param_checks.h"

namespace trainrt {

namespace {

constexpr std::string_view kCaller = "adam_step";

// The kernel's coefficients for a parameter about to take step t (t >= 1). Bias corrections and
// step sizes are computed in double, as torch computes them in Python floats, then rounded once.
AdamCoefficients coefficients_for(const AdamOptions& o, int64_t t, float grad_scale) {
  const double bc1 = o.bias_correction ? 1 - std::pow(o.beta1, static_cast<double>(t)) : 1.0;
  const double bc2 = o.bias_correction ? 1 - std::pow(o.beta2, static_cast<double>(t)) : 1.0;
  AdamCoefficients c{};
  c.grad_scale = grad_scale;
  c.l2 = 0.f;
  c.pre_decay = 1.f;
  c.beta1_weight = static_cast<float>(1 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1 - o.beta2);
  c.eps = static_cast<float>(o.eps);
  c.post_decay = 0.f;
  if (o.mode == WeightDecayMode::kHuggingFace) {
    c.bias_correction2_sqrt = 1.f;
    c.neg_step_size = static_cast<float>(-(o.lr * std::sqrt(bc2) / bc1));
    c.post_decay = static_cast<float>(-o.lr * o.weight_decay);
  } else {
    if (o.mode == WeightDecayMode::kL2)
      c.l2 = static_cast<float>(o.weight_decay);
    else
      c.pre_decay = static_cast<float>(1 - o.lr * o.weight_decay);
    c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
    c.neg_step_size = static_cast<float>(-(o.lr / bc1));
  }
  return c;
}

}  // namespace

AdamOptions AdamOptions::adamw() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  o.mode = WeightDecayMode::kDecoupled;
  return o;
}

void validate(const AdamOptions& o) {
  auto check = [](bool ok, std::string_view what, double value) {
    if (!ok) throw InvalidModel(fmt(kCaller, ": invalid ", what, " ", value));
  };
  check(o.lr >= 0, "lr", o.lr);
  check(o.eps >= 0, "eps", o.eps);
  check(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2);
  check(o.weight_decay >= 0, "weight_decay", o.weight_decay);
}

void adam_step(std::span<const ParamSlot> slots, const AdamOptions& options, float grad_scale) {
  validate(options);
  const StateBufferUse moments[] = {{&OptimizerState::exp_avg, "exp_avg"},
                                    {&OptimizerState::exp_avg_sq, "exp_avg_sq"},
                                    {&OptimizerState::max_exp_avg_sq, "max_exp_avg_sq"}};  // amsgrad only
  // Per slot, storage kept from step to step. A named reference: inside the pool's loop the
  // thread_local's name would mean each worker's own (empty) vector.
  thread_local std::vector<AdamCoefficients> kept;
  std::vector<AdamCoefficients>& coefficients = kept;
  prepare_moment_step(slots, kCaller, std::span(moments, options.amsgrad ? 3 : 2),
                      [&](int64_t t) { return coefficients_for(options, t, grad_scale); }, coefficients);

  slot_plan(slots, PlanOver::kParams).run([&](int64_t, const TensorSegment& seg) {
    const ParamSlot& s = slots[static_cast<size_t>(seg.tensor)];
    const AdamCoefficients& c = coefficients[static_cast<size_t>(seg.tensor)];
    const int64_t b = seg.begin;
    visit_param_dtype(s.param.dtype(), [&]<typename T>() {
      T* v_max = options.amsgrad ? s.state.max_exp_avg_sq.data<T>() + b : nullptr;
      const std::array<T*, 5> arrays{s.param.data<T>() + b, s.grad.data<T>() + b, s.state.exp_avg.data<T>() + b,
                                     s.state.exp_avg_sq.data<T>() + b, v_max};
      with_f32_blocks<T>(seg.end - b, arrays, {true, false, true, true, true},
                         [&](const std::array<float*, 5>& a, int64_t n) {
                           if (options.amsgrad)
                             adam_amsgrad_update(a[0], a[1], a[2], a[3], a[4], n, c);
                           else
                             adam_update(a[0], a[1], a[2], a[3], n, c);
                         });
    });
  });
  for (const ParamSlot& s : slots) ++s.state.step;
}

}  // namespace trainrt
