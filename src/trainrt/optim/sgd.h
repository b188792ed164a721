// Fused multi-tensor SGD: torch.optim.SGD's update applied in place to a list of parameters.
//
// Use sgd_step once per optimizer step after the gradients are final. It follows the
// implementation of torch.optim.SGD (torch/optim/sgd.py, _single_tensor_sgd, torch 2.13):
//   g = maximize ? -grad : grad
//   g = g + weight_decay * p                                  (weight_decay != 0)
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g   (momentum != 0)
//   g = nesterov ? g + momentum * buf : buf                   (momentum != 0)
//   p = p - lr * g
// The first step is the one that finds state.momentum_buffer undefined, as in torch; it creates it.
//
//   SgdOptions options;
//   options.lr = 0.1;
//   options.momentum = 0.9;
//   sgd_step(slots, options);                       // slots: see optimizer_state.h
//   sgd_step(slots, options, clip_scale(norm, 1.0)); // gradients scaled by the clip coefficient
#pragma once

#include <span>

#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

// Hyperparameters with torch.optim.SGD's defaults.
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// Throws InvalidModel naming the option when a value is out of range (torch's own checks:
// lr, momentum, weight_decay >= 0; nesterov needs momentum > 0 and dampening == 0).
void validate(const SgdOptions& options);

// One step on every slot, in place: param, and state (momentum_buffer, step). Every gradient is
// multiplied by grad_scale first (a clip or loss-scale coefficient folded into the same pass).
// f32, f16 and bf16 parameters; gradient and momentum buffer have the parameter's dtype, and
// 16-bit ones are computed in f32 and rounded once on store (f32_blocks.h), as
// torch.optim.SGD(fused=True) does. Throws before changing anything: UnsupportedOp for another
// dtype and ShapeError for mismatched gradient or state shapes, naming the parameter.
void sgd_step(std::span<const ParamSlot> slots, const SgdOptions& options, float grad_scale = 1.f);

}  // namespace trainrt
