// Fused multi-tensor Adam / AdamW applied in place to a list of parameters.
//
// Use adam_step once per optimizer step after the gradients are final. Three conventions for the
// weight decay, each exactly as its source computes it (t = state.step after the increment,
// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t):
//   kL2           torch.optim.Adam (torch/optim/adam.py, _single_tensor_adam):
//                   g = g + wd * p;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2
//                   p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
//   kDecoupled    torch.optim.AdamW (same function, decoupled_weight_decay=True):
//                   p = p * (1 - lr * wd), then the kL2 update with wd = 0
//   kHuggingFace  transformers' AdamW (transformers/optimization.py, correct_bias=True), bias
//                 correction folded into the step size and the decay applied after the update:
//                   p = p - (lr * sqrt(bc2) / bc1) * m / (sqrt(v) + eps);  p = p - lr * wd * p
// amsgrad (torch's): vmax = max(vmax, v) and the denominator uses vmax instead of v.
// bias_correction = false takes bc1 = bc2 = 1 in every mode (Apex FusedAdam's bias_correction=False,
// transformers' correct_bias=False); torch.optim.Adam / AdamW always correct.
//
//   std::vector<ParamSlot> slots = ...;            // see optimizer_state.h
//   AdamOptions options = AdamOptions::adamw();   // torch.optim.AdamW defaults
//   options.lr = 3e-4;
//   adam_step(slots, options);
#pragma once

#include <span>

#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

enum class WeightDecayMode { kL2, kDecoupled, kHuggingFace };

// Hyperparameters with torch.optim.Adam's defaults. (transformers' AdamW defaulted to eps 1e-6
// and weight_decay 0; set them when reproducing it.)
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool bias_correction = true;
  WeightDecayMode mode = WeightDecayMode::kL2;

  // torch.optim.AdamW's defaults: weight_decay 1e-2, decoupled.
  static AdamOptions adamw();
};

// Throws InvalidModel naming the option when a value is out of range (torch's checks: lr, eps,
// weight_decay >= 0 and 0 <= beta < 1).
void validate(const AdamOptions& options);

// One step on every slot, in place: param, and state (exp_avg, exp_avg_sq, max_exp_avg_sq with
// amsgrad, step). Every gradient is multiplied by grad_scale first (a clip or loss-scale
// coefficient folded into the same pass). f32, f16 and bf16 parameters; gradient and state have the
// parameter's dtype, and 16-bit ones are computed in f32 and rounded once on store (f32_blocks.h),
// as torch.optim.AdamW(fused=True) does. Throws before changing anything: UnsupportedOp for another
// dtype and ShapeError for mismatched gradient or state shapes, naming the parameter.
void adam_step(std::span<const ParamSlot> slots, const AdamOptions& options, float grad_scale = 1.f);

}  // namespace trainrt
