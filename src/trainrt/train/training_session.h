// TrainingSession: train a model graph from C++ alone, one micro-batch at a time.
//
// The graph must compute a scalar loss (see append_loss in loss_builder.h to add one). Every
// floating-point initializer is a trainable parameter unless frozen. train_step runs forward and
// backward as one planned program (the joint graph from build_gradients) and accumulates the
// gradients; optimizer_step applies the fused optimizer in place on the parameters, clips by the
// global norm when asked, advances the learning-rate schedule and resets the gradients lazily
// (the next train_step overwrites them instead of adding). eval_step runs the forward graph only.
//
//   TrainingConfig config{.loss = "loss", .optimizer = {.kind = OptimizerKind::kAdamW}};
//   config.optimizer.adam.lr = 1e-3;
//   TrainingSession trainer(std::move(graph), config);
//   for (auto& batch : batches) {
//     float loss = trainer.train_step({batch.x, batch.y});
//     trainer.optimizer_step();
//   }
//   trainer.export_inference_model("model_trained.onnx", {"logits"});
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/optim/adam.h"
#include "trainrt/optim/sgd.h"
#include "trainrt/runtime/session.h"
#include "trainrt/train/checkpoint.h"
#include "trainrt/train/lr_schedule.h"

namespace trainrt {

enum class OptimizerKind { kSgd, kAdam };  // kAdam covers Adam, AdamW and HF AdamW (AdamOptions::mode)

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;
  SgdOptions sgd;
  AdamOptions adam = AdamOptions::adamw();
  double max_grad_norm = 0;  // > 0: clip the global gradient norm to this before each step
};

struct TrainingConfig {
  std::string loss;                   // the scalar loss value of the graph
  std::vector<std::string> frozen;    // floating-point initializers that are not trained
  OptimizerConfig optimizer;
  LrSchedule schedule;
  uint64_t seed = 0;                  // seeds Dropout and other random ops
  // Elementwise chains as generated kernels (train/codegen_fusion.h); nullopt: off.
  std::optional<CodegenOptions> codegen;
};

class TrainingSession {
 public:
  TrainingSession(std::shared_ptr<Graph> graph, TrainingConfig config);
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;
  TrainingSession(TrainingSession&&) = default;

  // Forward and backward on one micro-batch (one tensor per graph input); returns the loss.
  float train_step(const std::vector<Tensor>& inputs);
  // Forward only: the graph's outputs (the loss among them).
  std::vector<Tensor> eval_step(const std::vector<Tensor>& inputs);
  // Applies the gradients accumulated since the last step. Throws InvalidModel before any train_step.
  void optimizer_step();
  void reset_grad() { grads_stale_ = true; }

  double learning_rate() const;          // the rate the next optimizer_step uses
  void set_learning_rate(double lr);     // the base rate the schedule scales
  int64_t step() const { return step_; }

  const std::vector<std::string>& parameter_names() const { return param_names_; }
  const Tensor& parameter(const std::string& name) const;
  const Tensor& gradient(const std::string& name) const;

  CheckpointState checkpoint() const;
  // Copies parameters and optimizer state from `state` (matching names, dtypes and dims).
  void load_checkpoint(const CheckpointState& state);
  // A forward-only ONNX model computing `outputs` with the current weights (the loss and label
  // inputs dropped when the outputs do not need them).
  void export_inference_model(const std::filesystem::path& path, const std::vector<std::string>& outputs) const;

  const Graph& graph() const { return *graph_; }

 private:
  std::shared_ptr<Graph> graph_;
  std::shared_ptr<Graph> joint_;
  TrainingConfig config_;
  std::vector<std::string> param_names_;
  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;
  std::vector<OptimizerState> states_;
  // What optimizer_step hands the optimizer, built once: references into the vectors above, whose
  // buffers never reallocate after construction (and move with the session).
  std::vector<ParamSlot> slots_;
  std::unique_ptr<Session> train_session_;
  std::unique_ptr<Session> eval_session_;
  int loss_index_ = 0;
  size_t num_forward_outputs_ = 0;
  bool grads_stale_ = true;
  bool has_grads_ = false;
  double base_lr_ = 0;
  int64_t step_ = 0;
};

}  // namespace trainrt
