#include "trainrt/optim/param_checks.h"

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

void check_param_and_grad(const ParamSlot& slot, std::string_view caller) {
  if (slot.param.dtype() != DType::kF32)
    throw UnsupportedOp(fmt(caller, ": parameter '", slot.name, "' is ", describe(slot.param),
                            "; supported parameter dtypes: f32"));
  check_grad(slot, caller);
  if (slot.grad.dims() != slot.param.dims())
    throw ShapeError(fmt(caller, ": gradient of parameter '", slot.name, "' is ", describe(slot.grad),
                         ", expected the parameter's shape ", to_string(slot.param.dims())));
}

void check_grad(const ParamSlot& slot, std::string_view caller) {
  if (slot.grad.dtype() != DType::kF32)
    throw UnsupportedOp(fmt(caller, ": gradient of parameter '", slot.name, "' is ", describe(slot.grad),
                            "; supported gradient dtypes: f32"));
}

void StateBuffers::require(Tensor& buffer, const ParamSlot& slot, std::string_view caller,
                           std::string_view buffer_name) {
  if (!buffer.defined()) {
    missing_.emplace_back(&buffer, &slot.param);
  } else if (buffer.dtype() != DType::kF32 || buffer.dims() != slot.param.dims()) {
    throw ShapeError(fmt(caller, ": state '", buffer_name, "' of parameter '", slot.name, "' is ",
                         describe(buffer), ", expected f32", to_string(slot.param.dims())));
  }
}

void StateBuffers::allocate() {
  std::vector<Tensor> fresh;
  fresh.reserve(missing_.size());
  for (const auto& [buffer, param] : missing_) fresh.push_back(Tensor::zeros(DType::kF32, param->dims()));
  for (size_t i = 0; i < missing_.size(); ++i) *missing_[i].first = std::move(fresh[i]);
  missing_.clear();
}

std::vector<int64_t> slot_numels(std::span<const ParamSlot> slots) {
  std::vector<int64_t> numels;
  numels.reserve(slots.size());
  for (const ParamSlot& s : slots) numels.push_back(s.param.numel());
  return numels;
}

}  // namespace trainrt
