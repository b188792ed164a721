// Checks and lazy state allocation shared by the multi-tensor optimizer calls (optim layer only).
//
// Every call validates all its slots before it touches any element, so a bad slot throws with
// every parameter and state unchanged. prepare_moment_step is the whole opening of a step with
// moment buffers (Adam, LAMB); SGD, whose coefficients depend on which buffers are new, uses the
// parts:
//
//   const StateBufferUse moments[] = {{&OptimizerState::exp_avg, "exp_avg"},
//                                     {&OptimizerState::exp_avg_sq, "exp_avg_sq"}};
//   thread_local std::vector<AdamCoefficients> c;  // storage kept from step to step
//   prepare_moment_step(slots, "adam_step", moments,
//       [&](int64_t t) { return coefficients_for(options, t); }, c);  // t: the step about to be taken
//   slot_plan(slots, PlanOver::kParams).run(...);
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

#include "trainrt/optim/multi_tensor.h"
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

// Checks every slot's parameter, gradient and `buffers`, creates the missing buffers, and sets
// `coefficients` to coefficients_for(t) per slot, t = state.step + 1 (the step it is about to
// take); the vector keeps its storage, so a caller that keeps it allocates nothing in steady state.
// Throws before anything changes.
template <typename CoefficientsFor, typename Coefficients>
void prepare_moment_step(std::span<const ParamSlot> slots, std::string_view caller,
                         std::span<const StateBufferUse> buffers, CoefficientsFor&& coefficients_for,
                         std::vector<Coefficients>& coefficients) {
  StateBuffers missing;
  for (const ParamSlot& s : slots) {
    check_param_and_grad(s, caller);
    for (const StateBufferUse& b : buffers) missing.require(s.state.*b.buffer, s, caller, b.name);
  }
  missing.allocate();
  coefficients.clear();
  for (const ParamSlot& s : slots) coefficients.push_back(coefficients_for(s.state.step + 1));
}

// Which tensor of each slot a plan splits (they have the same numel once checked; grad-only calls
// check only the gradients).
enum class PlanOver { kParams, kGrads };

// The calling thread's MultiTensorPlan over the slots' params or grads, made again only when their
// numels differ from the last call's on this thread, so a steady-state step neither replans nor
// allocates. Valid until the thread's next call.
const MultiTensorPlan& slot_plan(std::span<const ParamSlot> slots, PlanOver over);

}  // namespace trainrt
