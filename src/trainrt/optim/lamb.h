// Fused multi-tensor LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT
// in 76 minutes", 2019) applied in place to a list of parameters, as Apex's FusedLAMB computes it.
//
// Use lamb_step once per optimizer step after the gradients are final. The global gradient-norm
// clip of Apex's FusedLAMB (g / (norm / max_grad_norm) when norm > max_grad_norm, over every group)
// is the caller's: fold its factor into grad_scale (trainrt.optim.FusedLamb does). Per parameter,
// with t = state.step after the increment (apex/csrc/multi_tensor_lamb.cu, stages 1 and 2):
//   g  = g * grad_scale                    (+ weight_decay * p when !adam_w_mode: L2 on the gradient)
//   m  = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   u  = (m / bc1) / (sqrt(v / bc2) + eps)  (+ weight_decay * p when adam_w_mode: decoupled decay)
//   ratio = ||p|| / ||u|| when both norms are nonzero, else 1; applied only when weight_decay != 0
//           or use_nvlamb (Apex's rule: parameters without decay, biases and norms, take plain
//           Adam-like steps)
//   p  = p - lr * ratio * u
// with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (1 without bias_correction) and ||p|| the norm of the
// parameter before the step. Norms are summed in double, in a fixed order.
//
// Two passes over memory: the first updates m and v and sums ||p||^2 and ||u||^2 per parameter, the
// second recomputes u from the stored m and v and applies it, so no update buffer is needed. With
// f16 / bf16 parameters (state in the parameter's dtype, math in f32) u is computed from the moments
// as stored, rounded, in both passes, so the norm is the norm of the update applied.
//
//   LambOptions options;                                 // Apex FusedLAMB's defaults
//   options.lr = 1e-3;
//   lamb_step(slots, options, clip);                     // slots: see optimizer_state.h
#pragma once

#include <span>

#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  bool bias_correction = true;
  bool adam_w_mode = true;  // decoupled weight decay (on the update); false: L2 on the gradient
  bool use_nvlamb = false;  // the trust ratio also for parameters with weight_decay == 0
};

// Throws InvalidModel naming the option when a value is out of range (lr, eps, weight_decay >= 0
// and 0 <= beta < 1).
void validate(const LambOptions& options);

// One step on every slot, in place: param, and state (exp_avg, exp_avg_sq, step). Every gradient
// is multiplied by grad_scale first. f32, f16 and bf16 parameters (gradient and state in the
// parameter's dtype). Throws before changing anything: UnsupportedOp for another dtype and
// ShapeError for mismatched gradient or state shapes, naming the parameter.
void lamb_step(std::span<const ParamSlot> slots, const LambOptions& options, float grad_scale = 1.f);

}  // namespace trainrt
