#include "trainrt/optim/grad_ops.h"

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/optim/f32_blocks.h"
#include "trainrt/optim/optim_math.h"
#include "trainrt/optim/param_checks.h"

namespace trainrt {

namespace {

// Elementwise loops over one tensor split into pieces of this many elements (256 KiB of f32).
constexpr int64_t kGrain = 64 * 1024;

const MultiTensorPlan& grad_plan(std::span<const ParamSlot> slots, std::string_view caller) {
  for (const ParamSlot& s : slots) check_grad(s, caller);
  return slot_plan(slots, PlanOver::kGrads);
}

double sum_of_squares(std::span<const ParamSlot> slots, std::string_view caller) {
  const MultiTensorPlan& plan = grad_plan(slots, caller);
  // Per task, storage kept from call to call. A named reference: inside the pool's loop the
  // thread_local's name would mean each worker's own (empty) vector.
  thread_local std::vector<double> kept;
  std::vector<double>& partial = kept;
  partial.assign(static_cast<size_t>(plan.num_tasks()), 0.0);
  plan.run([&](int64_t task, const TensorSegment& seg) {
    Tensor& grad = slots[static_cast<size_t>(seg.tensor)].grad;
    visit_param_dtype(grad.dtype(), [&]<typename T>() {
      with_f32_blocks<T>(seg.end - seg.begin, std::array<T*, 1>{grad.data<T>() + seg.begin}, {false},
                         [&](const std::array<float*, 1>& g, int64_t n) {
                           partial[static_cast<size_t>(task)] += sum_squares(g[0], n);
                         });
    });
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

double grad_norm(std::span<const ParamSlot> slots) { return std::sqrt(sum_of_squares(slots, "grad_norm")); }

GradNormCheck unscaled_grad_norm(std::span<const ParamSlot> slots, double inv_scale) {
  const double total = sum_of_squares(slots, "unscaled_grad_norm");
  const bool found_inf = !std::isfinite(total);
  return {found_inf ? total : std::sqrt(total) * inv_scale, found_inf};
}

void scale_grads(std::span<const ParamSlot> slots, float scale) {
  grad_plan(slots, "scale_grads").run([&](int64_t, const TensorSegment& seg) {
    Tensor& grad = slots[static_cast<size_t>(seg.tensor)].grad;
    visit_param_dtype(grad.dtype(), [&]<typename T>() {
      with_f32_blocks<T>(seg.end - seg.begin, std::array<T*, 1>{grad.data<T>() + seg.begin}, {true},
                         [&](const std::array<float*, 1>& g, int64_t n) { scale_in_place(g[0], n, scale); });
    });
  });
}

float clip_scale(double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient >= 1 ? 1.f : static_cast<float>(coefficient);  // NaN stays NaN
}

double clip_grad_norm(std::span<const ParamSlot> slots, double max_norm) {
  const double norm = grad_norm(slots);
  const float scale = clip_scale(norm, max_norm);
  if (scale == 1.f) return norm;
  scale_grads(slots, scale);
  return norm;
}

void accumulate_grad(Tensor& grad_acc, const Tensor& grad, std::string_view name) {
  if (grad_acc.dtype() != DType::kF32 || grad.dtype() != DType::kF32)
    throw UnsupportedOp(fmt("accumulate_grad: parameter '", name, "': accumulator ", describe(grad_acc),
                            ", gradient ", describe(grad), "; supported dtypes: f32"));
  if (grad_acc.dims() != grad.dims())
    throw ShapeError(fmt("accumulate_grad: parameter '", name, "': gradient ", describe(grad),
                         " does not match the accumulator ", describe(grad_acc)));
  float* acc = grad_acc.data<float>();
  const float* g = grad.data<float>();
  ThreadPool::global().parallel_for(grad.numel(), kGrain, [&](int64_t begin, int64_t end) {
    add_in_place(acc + begin, g + begin, end - begin);
  });
}

void zero_grad(Tensor& grad) {
  auto* bytes = static_cast<char*>(grad.raw());
  const int64_t n = static_cast<int64_t>(grad.nbytes());
  ThreadPool::global().parallel_for(n, kGrain * 4, [&](int64_t begin, int64_t end) {
    std::memset(bytes + begin, 0, static_cast<size_t>(end - begin));
  });
}

}  // namespace trainrt
