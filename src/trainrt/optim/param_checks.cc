#include "trainrt/optim/param_checks.h"

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

namespace {
bool is_optimizer_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
}  // namespace

void check_param_and_grad(const ParamSlot& slot, std::string_view caller) {
  if (!is_optimizer_dtype(slot.param.dtype()))
    throw UnsupportedOp(fmt(caller, ": parameter '", slot.name, "' is ", describe(slot.param),
                            "; supported parameter dtypes: f32, f16, bf16"));
  if (slot.grad.dtype() != slot.param.dtype())
    throw UnsupportedOp(fmt(caller, ": gradient of parameter '", slot.name, "' is ", describe(slot.grad),
                            ", expected the parameter's dtype (", describe(slot.param), ")"));
  if (slot.grad.dims() != slot.param.dims())
    throw ShapeError(fmt(caller, ": gradient of parameter '", slot.name, "' is ", describe(slot.grad),
                         ", expected the parameter's shape ", to_string(slot.param.dims())));
}

void check_grad(const ParamSlot& slot, std::string_view caller) {
  if (!is_optimizer_dtype(slot.grad.dtype()))
    throw UnsupportedOp(fmt(caller, ": gradient of parameter '", slot.name, "' is ", describe(slot.grad),
                            "; supported gradient dtypes: f32, f16, bf16"));
}

void StateBuffers::require(Tensor& buffer, const ParamSlot& slot, std::string_view caller,
                           std::string_view buffer_name) {
  if (!buffer.defined()) {
    missing_.emplace_back(&buffer, &slot.param);
  } else if (buffer.dtype() != slot.param.dtype() || buffer.dims() != slot.param.dims()) {
    throw ShapeError(fmt(caller, ": state '", buffer_name, "' of parameter '", slot.name, "' is ",
                         describe(buffer), ", expected the parameter's ", describe(slot.param)));
  }
}

void StateBuffers::allocate() {
  std::vector<Tensor> fresh;
  fresh.reserve(missing_.size());
  for (const auto& [buffer, param] : missing_) fresh.push_back(Tensor::zeros(param->dtype(), param->dims()));
  for (size_t i = 0; i < missing_.size(); ++i) *missing_[i].first = std::move(fresh[i]);
  missing_.clear();
}

const MultiTensorPlan& slot_plan(std::span<const ParamSlot> slots, PlanOver over) {
  thread_local std::vector<int64_t> numels;
  thread_local MultiTensorPlan plan(numels);
  auto numel = [over](const ParamSlot& s) { return over == PlanOver::kParams ? s.param.numel() : s.grad.numel(); };
  bool same = numels.size() == slots.size();
  for (size_t i = 0; same && i < slots.size(); ++i) same = numels[i] == numel(slots[i]);
  if (same) return plan;
  numels.clear();
  for (const ParamSlot& s : slots) numels.push_back(numel(s));
  plan = MultiTensorPlan(numels);
  return plan;
}

}  // namespace trainrt
