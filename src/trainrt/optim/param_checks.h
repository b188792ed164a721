// Checks and lazy state allocation shared by the multi-tensor optimizer calls (optim layer only).
//
// Every call validates all its slots before it touches any element, so a bad slot throws with
// every parameter and state unchanged. prepare_moment_step is the whole opening of a step with
// moment buffers (Adam, LAMB); SGD, whose coefficients depend on which buffers are new, uses the
// parts:
//
//   const StateBufferUse moments[] = {{&OptimizerState::exp_avg, "exp_avg"},
//                                     {&OptimizerState::exp_avg_sq, "exp_avg_sq"}};
//   std::vector<AdamCoefficients> c = prepare_moment_step(slots, "adam_step", moments,
//       [&](int64_t t) { return coefficients_for(options, t); });  // t: the step about to be taken
//
//   StateBuffers buffers;
//   for (const ParamSlot& s : slots) {
//     check_param_and_grad(s, "adam_step");
//     buffers.require(s.state.exp_avg, s, "adam_step", "exp_avg");
//   }
//   buffers.allocate();                     // nothing has changed before this line
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

// Throws UnsupportedOp when the parameter is not f32, f16 or bf16 or the gradient's dtype is not
// the parameter's (torch's rule for .grad), ShapeError when the gradient's dims are not the
// parameter's; the messages name the parameter and give dtypes and shapes.
void check_param_and_grad(const ParamSlot& slot, std::string_view caller);

// Throws UnsupportedOp unless the gradient is f32, f16 or bf16 (for grad-only calls).
void check_grad(const ParamSlot& slot, std::string_view caller);

// The state buffers one call needs. require() checks a defined buffer (e.g. one loaded from a
// checkpoint) against the parameter and notes an undefined one; allocate() then creates all the
// noted buffers as zeros of the parameter's dtype and dims (torch initializes its state lazily the
// same way, torch.zeros_like(param)), or none when an allocation fails, so a failed call leaves
// every state as it was.
class StateBuffers {
 public:
  // ShapeError naming the parameter and buffer when a defined buffer has not the param's dtype and dims.
  void require(Tensor& buffer, const ParamSlot& slot, std::string_view caller, std::string_view buffer_name);
  void allocate();

 private:
  std::vector<std::pair<Tensor*, const Tensor*>> missing_;  // (buffer, its parameter)
};

// A state buffer a step uses: the member of OptimizerState and its name in messages.
struct StateBufferUse {
  Tensor OptimizerState::*buffer;
  std::string_view name;
};

// Checks every slot's parameter, gradient and `buffers`, creates the missing buffers, and returns
// coefficients_for(t) per slot, t = state.step + 1 (the step it is about to take). Throws before
// anything changes.
template <typename CoefficientsFor>
auto prepare_moment_step(std::span<const ParamSlot> slots, std::string_view caller,
                         std::span<const StateBufferUse> buffers, CoefficientsFor&& coefficients_for)
    -> std::vector<decltype(coefficients_for(int64_t{1}))> {
  StateBuffers missing;
  for (const ParamSlot& s : slots) {
    check_param_and_grad(s, caller);
    for (const StateBufferUse& b : buffers) missing.require(s.state.*b.buffer, s, caller, b.name);
  }
  missing.allocate();
  std::vector<decltype(coefficients_for(int64_t{1}))> coefficients;
  coefficients.reserve(slots.size());
  for (const ParamSlot& s : slots) coefficients.push_back(coefficients_for(s.state.step + 1));
  return coefficients;
}

// numel of every slot's param, in order (the input of a MultiTensorPlan).
std::vector<int64_t> slot_numels(std::span<const ParamSlot> slots);

}  // namespace trainrt
