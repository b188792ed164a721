// Gradient helpers around the optimizer step: global norm, clipping, accumulation, zeroing.
//
// Use grad_norm + clip_scale to clip inside the optimizer's own pass (two passes over the
// gradients in all: one reads them for the norm, the step reads them once more), or
// clip_grad_norm to scale the gradients in place as torch.nn.utils.clip_grad_norm_ does.
// accumulate_grad / zero_grad serve gradient accumulation over micro-batches.
// unscaled_grad_norm + scale_grads serve loss scaling (trainrt.optim.FP16_Optimizer): one pass
// reads the scaled gradients for the unscaled norm and the overflow check, a second (only where the
// optimizer cannot take the factor as its grad_scale) rescales them in place.
//
//   double norm = grad_norm(slots);                        // L2 over every gradient
//   adam_step(slots, options, clip_scale(norm, 1.0));      // clipped to max_norm 1 on the fly
//
//   accumulate_grad(grad_acc, micro_batch_grad, "fc.weight");   // grad_acc += grad
//   zero_grad(grad_acc);                                        // after the step
#pragma once

#include <span>
#include <string_view>

#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

// sqrt(sum of g^2 over every element of every slot's grad), the squares summed in double per
// piece and the pieces in a fixed order (the result does not depend on thread timing). Inf or NaN
// gradients give an inf or NaN norm. f32, f16 and bf16 gradients (16-bit ones widened exactly);
// UnsupportedOp naming the parameter for another dtype.
double grad_norm(std::span<const ParamSlot> slots);

// torch.nn.utils.clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)), NaN when norm
// is NaN (torch's clamp keeps NaN, so a NaN norm poisons the step visibly rather than silently).
float clip_scale(double norm, double max_norm);

// torch.nn.utils.clip_grad_norm_(norm_type=2): scales every gradient in place by
// clip_scale(norm, max_norm) when that is below 1 (or NaN) and returns the norm before clipping.
double clip_grad_norm(std::span<const ParamSlot> slots, double max_norm);

// The global L2 norm of the gradients multiplied by inv_scale (the norm of the unscaled gradients)
// and whether any gradient element is inf or NaN, from one pass over the gradients: the squares are
// summed in double as grad_norm does, and a sum of squares of finite f32 values cannot overflow a
// double, so the sum is finite exactly when every element is. On overflow, norm is inf or NaN.
struct GradNormCheck {
  double norm;
  bool found_inf;
};
GradNormCheck unscaled_grad_norm(std::span<const ParamSlot> slots, double inv_scale);

// g = g * scale for every slot's gradient, in place, spread over the thread pool (f32, or f16 / bf16
// computed in f32 and rounded to nearest even).
void scale_grads(std::span<const ParamSlot> slots, float scale);

// grad_acc += grad, elementwise (f32, same dims; ShapeError / UnsupportedOp naming `name`).
void accumulate_grad(Tensor& grad_acc, const Tensor& grad, std::string_view name);

// grad = 0 for any dtype.
void zero_grad(Tensor& grad);

}  // namespace trainrt
