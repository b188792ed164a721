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
//
// A parameter larger than two row blocks (kRowBlockBytes by default) takes its gradient in row blocks
// where the backward can make it so (output_consumer.h): each block steps the matching rows of the
// parameter and its state with the same adam_step / sgd_step, while the block is still in cache. The
// step counter advances once per parameter, after its last block; the results are those of the
// whole-gradient step, bit for bit (elementwise math, same order per element).
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
  // Gradients of more than 2 * row_block_bytes come in row blocks of that many bytes; 0: always whole.
  explicit OptimizerInBackward(size_t row_block_bytes = kRowBlockBytes) : block_bytes_(row_block_bytes) {}

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
  // The block size for a registered parameter larger than two blocks whose state is all there
  // (SGD's momentum buffer is created whole by the first step), else 0.
  size_t row_block_bytes(size_t index) const override;
  // The step of rows [row_begin, row_begin + rows.dim(0)) of the parameter under `index`. Throws
  // ShapeError naming the parameter for rows that do not match its dims.
  void consume_rows(size_t index, const Tensor& rows, int64_t row_begin) override;

  // A 36 MiB gradient does not fit the 32 MiB L3 (stepped whole, it is read back from memory); a
  // 2 MiB block does, and is large enough for both cores to share its product and its step. Measured
  // on 13 x 3072^2 Linear weights, idle machine, step minus forward + backward: 2 MiB and 4 MiB
  // blocks make the training step ~12% faster than a step after the backward; 128 KiB blocks
  // (one core each) tie with it, 8 MiB blocks are slower.
  static constexpr size_t kRowBlockBytes = size_t{2} << 20;

  std::vector<size_t> indices() const;  // the registered indices, sorted
  bool stepped(size_t index) const;     // whether consume() ran for it
  const Tensor& momentum_buffer(size_t index) const;

 private:
  size_t block_bytes_;
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

  Entry& entry(size_t index);
  void step(Entry& e, const ParamSlot& slot);

  std::map<size_t, Entry> entries_;
  Tensor grad_;  // the gradient being consumed, as a ParamSlot takes it
  // The rows a block steps: views of the entry's param and state, rebound per block.
  Tensor param_rows_;
  OptimizerState state_rows_;
};

}  // namespace trainrt
