#include "trainrt/train/optimizer_in_backward.h"

#include <cmath>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

int64_t read_step(const Tensor& step, const std::string& name) {
  if (step.numel() != 1 || (step.dtype() != DType::kF32 && step.dtype() != DType::kF64))
    throw ShapeError(fmt("optimizer in backward: step counter of parameter '", name, "' is ", describe(step),
                         ", expected a one-element f32 or f64 tensor"));
  const double value = step.to_double(0);
  if (!(value >= 0) || value != std::floor(value) || value > 9.0e15)
    throw InvalidModel(fmt("optimizer in backward: step counter of parameter '", name, "' is ", value,
                           ", expected a non-negative integer"));
  return static_cast<int64_t>(value);
}

void write_step(Tensor& step, int64_t value) {
  if (step.dtype() == DType::kF32) *step.data<float>() = static_cast<float>(value);
  else *step.data<double>() = static_cast<double>(value);
}

}  // namespace

OptimizerInBackward::Entry& OptimizerInBackward::add(size_t index, std::string name, Tensor param, Tensor step,
                                                     OptimizerState state, float grad_scale) {
  read_step(step, name);  // checked now, read again at each step
  auto [it, added] = entries_.try_emplace(index);
  if (!added)
    throw InvalidModel(fmt("optimizer in backward: parameter '", name, "' registered under index ", index,
                           ", which '", it->second.name, "' already has"));
  Entry& e = it->second;
  e.name = std::move(name);
  e.param = std::move(param);
  e.step = std::move(step);
  e.state = std::move(state);
  e.grad_scale = grad_scale;
  return e;
}

void OptimizerInBackward::add_adam(size_t index, std::string name, Tensor param, Tensor step, OptimizerState state,
                                   const AdamOptions& options, float grad_scale) {
  validate(options);
  const bool missing = !state.exp_avg.defined() || !state.exp_avg_sq.defined() ||
                       (options.amsgrad && !state.max_exp_avg_sq.defined());
  if (missing)
    throw InvalidModel(fmt("optimizer in backward: parameter '", name, "' has no exp_avg / exp_avg_sq",
                           options.amsgrad ? " / max_exp_avg_sq" : "", " buffer (create them before the backward)"));
  add(index, std::move(name), std::move(param), std::move(step), std::move(state), grad_scale).adam = options;
}

void OptimizerInBackward::add_sgd(size_t index, std::string name, Tensor param, Tensor step, OptimizerState state,
                                  const SgdOptions& options, float grad_scale) {
  validate(options);
  add(index, std::move(name), std::move(param), std::move(step), std::move(state), grad_scale).sgd = options;
}

void OptimizerInBackward::consume(size_t index, const Tensor& grad) {
  auto it = entries_.find(index);
  if (it == entries_.end())
    throw InternalError(fmt("optimizer in backward: gradient ", index,
                            " came, but no parameter was registered for it"));
  Entry& e = it->second;
  grad_ = grad;  // reuses grad_'s dims storage: no allocation per parameter
  e.state.step = read_step(e.step, e.name);
  const ParamSlot slot{e.name, e.param, grad_, e.state};
  if (e.adam) adam_step({&slot, 1}, *e.adam, e.grad_scale);
  else sgd_step({&slot, 1}, e.sgd, e.grad_scale);
  write_step(e.step, e.state.step);
  e.stepped = true;
  grad_ = Tensor();  // the bytes are the backward's again
}

std::vector<size_t> OptimizerInBackward::indices() const {
  std::vector<size_t> out;
  for (const auto& [index, e] : entries_) out.push_back(index);
  return out;
}

const OptimizerInBackward::Entry& OptimizerInBackward::at(size_t index) const {
  auto it = entries_.find(index);
  if (it == entries_.end()) throw InvalidModel(fmt("optimizer in backward: no parameter under index ", index));
  return it->second;
}

bool OptimizerInBackward::stepped(size_t index) const { return at(index).stepped; }

const Tensor& OptimizerInBackward::momentum_buffer(size_t index) const { return at(index).state.momentum_buffer; }

}  // namespace trainrt
