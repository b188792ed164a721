// Per-parameter optimizer state and the slot through which a multi-tensor step sees a parameter.
//
// Use OptimizerState to keep what an optimizer remembers about one parameter between steps (the
// step count and its moment buffers) and to save it in a checkpoint (train/checkpoint.h). A
// ParamSlot binds one parameter, its gradient and its state for one call of sgd_step / adam_step /
// grad_norm; slots are cheap views, built afresh for each call.
//
//   OptimizerState state;                        // empty: buffers are created on the first step
//   std::vector<ParamSlot> slots{{"fc.weight", weight, weight_grad, state}};
//   adam_step(slots, AdamOptions::adamw());      // state.step == 1, exp_avg / exp_avg_sq allocated
#pragma once

#include <cstdint>
#include <string_view>

#include "trainrt/core/tensor.h"

namespace trainrt {

// What torch.optim keeps in optimizer.state[p]. Buffers have the parameter's dims and dtype, as
// torch keeps them (torch.zeros_like(param)): a bf16 parameter has bf16 moments, and the step's
// math runs in f32 on widened values (f32_blocks.h). A buffer an optimizer does not use stays
// undefined. Buffers are allocated (zeroed) by the first step that needs them, as torch does.
struct OptimizerState {
  int64_t step = 0;        // steps taken on this parameter (torch's state["step"])
  Tensor exp_avg;          // Adam first moment m
  Tensor exp_avg_sq;       // Adam second moment v
  Tensor max_exp_avg_sq;   // Adam amsgrad: running max of v
  Tensor momentum_buffer;  // SGD with momentum != 0
};

// One parameter as a multi-tensor call sees it. `name` appears in error messages. The step
// updates param and state in place; clip_grad_norm scales grad in place. A Tensor may view
// memory owned elsewhere (an arena, a torch tensor), so these are the buffers themselves.
struct ParamSlot {
  std::string_view name;
  Tensor& param;
  Tensor& grad;
  OptimizerState& state;
};

}  // namespace trainrt
