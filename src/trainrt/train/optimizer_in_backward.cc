#include "trainrt/train/optimizer_in_backward.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

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

OptimizerInBackward::Entry& OptimizerInBackward::entry(size_t index) {
  auto it = entries_.find(index);
  if (it == entries_.end())
    throw InternalError(fmt("optimizer in backward: gradient ", index,
                            " came, but no parameter was registered for it"));
  return it->second;
}

void OptimizerInBackward::step(Entry& e, const ParamSlot& slot) {
  if (e.adam) adam_step({&slot, 1}, *e.adam, e.grad_scale);
  else sgd_step({&slot, 1}, e.sgd, e.grad_scale);
}

void OptimizerInBackward::consume(size_t index, const Tensor& grad) {
  Entry& e = entry(index);
  grad_ = grad;  // reuses grad_'s dims storage: no allocation per parameter
  e.state.step = read_step(e.step, e.name);
  step(e, {e.name, e.param, grad_, e.state});
  write_step(e.step, e.state.step);
  e.stepped = true;
  grad_ = Tensor();  // the bytes are the backward's again
}

size_t OptimizerInBackward::row_block_bytes(size_t index) const {
  auto it = entries_.find(index);
  if (it == entries_.end()) return 0;
  const Entry& e = it->second;
  const bool state_whole = e.adam || e.sgd.momentum == 0 || e.state.momentum_buffer.defined();
  return state_whole && block_bytes_ > 0 && e.param.nbytes() > 2 * block_bytes_ ? block_bytes_ : 0;
}

namespace {

// Points `view` at rows [row_begin, row_begin + dims[0]) of `whole` (dims: those rows' dims).
void point_at_rows(Tensor& view, const Tensor& whole, int64_t row_begin, const std::vector<int64_t>& dims) {
  if (!whole.defined()) {  // a buffer this parameter's step does not use
    view = Tensor();
    return;
  }
  auto* first = static_cast<std::byte*>(const_cast<void*>(whole.raw())) +
                static_cast<size_t>(row_begin) * (whole.nbytes() / static_cast<size_t>(whole.dim(0)));
  if (view.dtype() == whole.dtype()) view.rebind(first, dims);  // no allocation in steady state
  else view = Tensor::view(whole.dtype(), dims, first);
}

}  // namespace

void OptimizerInBackward::consume_rows(size_t index, const Tensor& rows, int64_t row_begin) {
  Entry& e = entry(index);
  const auto& dims = e.param.dims();
  const bool fits = rows.rank() == e.param.rank() && rows.rank() >= 1 && row_begin >= 0 &&
                    row_begin + rows.dim(0) <= e.param.dim(0) &&
                    std::equal(dims.begin() + 1, dims.end(), rows.dims().begin() + 1);
  if (!fits)
    throw ShapeError(fmt("optimizer in backward: rows from ", row_begin, " of the gradient of parameter '", e.name,
                         "' are ", describe(rows), ", which are no rows of the parameter ", describe(e.param)));
  if (row_begin == 0) e.state.step = read_step(e.step, e.name);
  grad_ = rows;
  point_at_rows(param_rows_, e.param, row_begin, rows.dims());
  point_at_rows(state_rows_.exp_avg, e.state.exp_avg, row_begin, rows.dims());
  point_at_rows(state_rows_.exp_avg_sq, e.state.exp_avg_sq, row_begin, rows.dims());
  point_at_rows(state_rows_.max_exp_avg_sq, e.state.max_exp_avg_sq, row_begin, rows.dims());
  point_at_rows(state_rows_.momentum_buffer, e.state.momentum_buffer, row_begin, rows.dims());
  state_rows_.step = e.state.step;  // every block steps from the parameter's count
  step(e, {e.name, param_rows_, grad_, state_rows_});
  if (row_begin + rows.dim(0) == e.param.dim(0)) {  // the last block: the parameter took one step
    write_step(e.step, state_rows_.step);
    e.state.step = state_rows_.step;
    e.stepped = true;
  }
  grad_.rebind(nullptr, grad_.dims());  // the bytes are the backward's again; the dims storage stays
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
