// OptimizerInBackward: the optimizer step of each parameter applied inside the backward, as soon as
// its gradient is final (torch's "optimizer in backward": Tensor.register_post_accumulate_grad_hook;
// ggml's optimizer step as part of the graph).
//
// Use it as the consumer of ModulePrograms::backward (or any Session run with consumed outputs) when
// every backward is followed by one optimizer step with no look at the gradients in between: no
// gradient accumulation over several backwards, no clipping by the global norm. Each parameter is
// stepped with adam_step / sgd_step (optim/), the same math as a step after the backward, on its
// gradient while it is still in cache, and the gradient's bytes then serve the next value of the
// backward: the gradients are never all in memory at once, and never written to fresh storage.
//
//   OptimizerInBackward opt;
//   opt.add_adam(0, "fc.weight", weight, step, {.exp_avg = m, .exp_avg_sq = v}, AdamOptions::adamw());
//   programs.backward(state, {Tensor::scalar(1.f)}, opt.indices(), &opt);   // fc.weight updated
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/optim/adam.h"
#include "trainrt/optim/sgd.h"
#include "trainrt/runtime/output_consumer.h"

namespace trainrt {

class OptimizerInBackward : public OutputConsumer {
 public:
  // Steps `param` with Adam when gradient `index` comes. param and the state's buffers are the
  // caller's (views), updated in place; every buffer the options use must be defined (zeros before
  // the first step, as torch.optim creates them). `step` is a one-element f32 or f64 tensor with the
  // step count (torch's state["step"]), incremented in place. The gradient is multiplied by
  // grad_scale as it is read (-1: maximize). Throws InvalidModel naming the parameter for an index
  // given twice, a missing buffer or an option out of range.
  void add_adam(size_t index, std::string name, Tensor param, Tensor step, OptimizerState state,
                const AdamOptions& options, float grad_scale = 1.f);
  // The same with SGD. The momentum buffer may be undefined: the first step creates it (as torch
  // does, from the gradient) and momentum_buffer() hands it out.
  void add_sgd(size_t index, std::string name, Tensor param, Tensor step, OptimizerState state,
               const SgdOptions& options, float grad_scale = 1.f);

  // One step of the parameter registered under `index`, with `grad` (valid during the call only).
  // Throws InternalError for an index no parameter was registered under.
  void consume(size_t index, const Tensor& grad) override;

  std::vector<size_t> indices() const;  // the registered indices, sorted
  bool stepped(size_t index) const;     // whether consume() ran for it
  const Tensor& momentum_buffer(size_t index) const;

 private:
  struct Entry {
    std::string name;
    Tensor param, step;
    OptimizerState state;
    std::optional<AdamOptions> adam;  // else sgd
    SgdOptions sgd;
    float grad_scale = 1.f;
    bool stepped = false;
  };
  Entry& add(size_t index, std::string name, Tensor param, Tensor step, OptimizerState state, float grad_scale);
  const Entry& at(size_t index) const;

  std::map<size_t, Entry> entries_;
  Tensor grad_;  // the gradient being consumed, as a ParamSlot takes it
};

}  // namespace trainrt
