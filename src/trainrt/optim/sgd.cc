#include "trainrt/optim/sgd.h"

#include <array>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/optim/f32_blocks.h"
#include "trainrt/optim/optim_math.h"
#include "trainrt/optim/param_checks.h"

namespace trainrt {

namespace {
constexpr std::string_view kCaller = "sgd_step";
}  // namespace

void validate(const SgdOptions& o) {
  auto fail = [](std::string_view what, double value) {
    throw InvalidModel(fmt(kCaller, ": invalid ", what, " ", value));
  };
  if (!(o.lr >= 0)) fail("lr", o.lr);
  if (!(o.momentum >= 0)) fail("momentum", o.momentum);
  if (!(o.weight_decay >= 0)) fail("weight_decay", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw InvalidModel(fmt(kCaller, ": nesterov needs momentum > 0 and dampening == 0 (momentum ",
                           o.momentum, ", dampening ", o.dampening, ")"));
}

void sgd_step(std::span<const ParamSlot> slots, const SgdOptions& options, float grad_scale) {
  validate(options);
  const bool use_momentum = options.momentum != 0;
  // Which slots take their first momentum step: decided before buffers are created.
  // Per slot, storage kept from step to step. Named references: inside the pool's loop a
  // thread_local's name would mean each worker's own (empty) vector.
  thread_local std::vector<char> kept_first_step;
  thread_local std::vector<SgdCoefficients> kept_coefficients;
  std::vector<char>& first_step = kept_first_step;
  std::vector<SgdCoefficients>& coefficients = kept_coefficients;
  first_step.assign(slots.size(), 0);
  StateBuffers buffers;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot& s = slots[i];
    check_param_and_grad(s, kCaller);
    if (!use_momentum) continue;
    first_step[i] = !s.state.momentum_buffer.defined();
    buffers.require(s.state.momentum_buffer, s, kCaller, "momentum_buffer");
  }
  buffers.allocate();

  coefficients.assign(slots.size(), SgdCoefficients{});
  for (size_t i = 0; i < slots.size(); ++i) {
    SgdCoefficients& c = coefficients[i];
    c.grad_scale = options.maximize ? -grad_scale : grad_scale;
    c.weight_decay = static_cast<float>(options.weight_decay);
    c.lr = static_cast<float>(options.lr);
    // First step: buf = 0 * 0 + 1 * g, exactly torch's buf = grad.clone().
    c.buf_keep = first_step[i] ? 0.f : static_cast<float>(options.momentum);
    c.buf_take = first_step[i] ? 1.f : static_cast<float>(1 - options.dampening);
    c.d_grad = options.nesterov ? 1.f : 0.f;
    c.d_buf = options.nesterov ? static_cast<float>(options.momentum) : 1.f;
  }

  slot_plan(slots, PlanOver::kParams).run([&](int64_t, const TensorSegment& seg) {
    const ParamSlot& s = slots[static_cast<size_t>(seg.tensor)];
    const SgdCoefficients& c = coefficients[static_cast<size_t>(seg.tensor)];
    const int64_t b = seg.begin;
    visit_param_dtype(s.param.dtype(), [&]<typename T>() {
      T* buf = use_momentum ? s.state.momentum_buffer.data<T>() + b : nullptr;
      const std::array<T*, 3> arrays{s.param.data<T>() + b, s.grad.data<T>() + b, buf};
      with_f32_blocks<T>(seg.end - b, arrays, {true, false, true}, [&](const std::array<float*, 3>& a, int64_t n) {
        if (use_momentum)
          sgd_momentum_update(a[0], a[1], a[2], n, c);
        else
          sgd_update(a[0], a[1], n, c);
      });
    });
  });
  for (const ParamSlot& s : slots) ++s.state.step;
}

}  // namespace trainrt
