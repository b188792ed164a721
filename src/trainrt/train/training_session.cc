#include "trainrt/train/training_session.h"

#include "trainrt/ops/op_schema.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/optim/grad_ops.h"
#include "trainrt/passes/gradient_sum_chain.h"
#include "trainrt/passes/low_precision_compute.h"
#include "trainrt/passes/scatter_accumulation.h"
#include "trainrt/plan/partition.h"
#include "trainrt/train/codegen_fusion.h"
#include "trainrt/train/low_precision_graph.h"

namespace trainrt {
namespace {

std::vector<const Value*> const_values(const std::vector<Value*>& v) { return {v.begin(), v.end()}; }

std::vector<const Node*> all_nodes(const Graph& g) {
  std::vector<const Node*> out;
  for (const Node* n : g.topological_order()) out.push_back(n);
  return out;
}

// The nodes needed to compute `outputs`, in topological order.
std::vector<const Node*> nodes_for(const Graph& g, const std::vector<const Value*>& outputs) {
  std::unordered_set<const Node*> needed;
  std::vector<const Value*> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!v || !v->producer || !needed.insert(v->producer).second) continue;
    for (const Value* in : v->producer->inputs()) stack.push_back(in);
  }
  std::vector<const Node*> out;
  for (const Node* n : g.topological_order())
    if (needed.count(n)) out.push_back(n);
  return out;
}

}  // namespace

TrainingSession::TrainingSession(std::shared_ptr<Graph> graph, TrainingConfig config)
    : graph_(std::move(graph)), config_(std::move(config)) {
  Value* loss = graph_->find_value(config_.loss);
  if (!loss) throw InvalidModel(fmt("training: loss '", config_.loss, "' is not a value of the graph"));
  for (const std::string& name : config_.frozen) {
    Value* v = graph_->find_value(name);
    if (!v || !v->is_initializer()) throw InvalidModel(fmt("training: frozen '", name, "' is not an initializer"));
  }
  std::unordered_set<const Value*> graph_inputs(graph_->inputs().begin(), graph_->inputs().end());
  for (Value* v : graph_->initializers()) {
    bool frozen = std::find(config_.frozen.begin(), config_.frozen.end(), v->name) != config_.frozen.end();
    if (!is_floating(v->dtype) || frozen || graph_inputs.count(v)) continue;
    param_names_.push_back(v->name);
    params_.push_back(v->data);
  }
  if (param_names_.empty()) throw InvalidModel("training: the graph has no trainable floating-point initializer");

  // The joint graph works on a copy of the model that shares the parameters' storage.
  std::vector<const Value*> outputs = const_values(graph_->outputs());
  if (std::find(outputs.begin(), outputs.end(), loss) == outputs.end()) outputs.push_back(loss);
  joint_ = extract_subgraph(*graph_, all_nodes(*graph_), const_values(graph_->inputs()), outputs, graph_->name + "_train");
  num_forward_outputs_ = outputs.size();
  loss_index_ = static_cast<int>(std::find(outputs.begin(), outputs.end(), loss) - outputs.begin());
  LowPrecisionCompute().apply(*joint_);  // bf16 / f16 nodes whose schema takes f32 only: between casts
  infer_graph_shapes(*joint_);  // gradient rules read ranks and dims an exported file may not declare
  build_gradients(*joint_, {.loss = config_.loss, .wrt = param_names_});
  GradientSumChain().apply(*joint_);     // each gradient's parts summed as they come
  ScatterAccumulation().apply(*joint_);  // a tied embedding's scatter adds onto the head's gradient
  if (config_.codegen) fuse_elementwise_with_codegen({{joint_.get(), {}}}, *config_.codegen);

  SessionOptions options;
  options.mutable_initializers = {param_names_.begin(), param_names_.end()};
  options.seed = config_.seed;
  options.arena = std::make_shared<Arena>();  // train and eval steps never overlap: one block
  train_session_ = std::make_unique<Session>(joint_, options);
  eval_session_ = std::make_unique<Session>(low_precision_graph(graph_), options);
  grads_.resize(params_.size());
  states_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) slots_.push_back({param_names_[i], params_[i], grads_[i], states_[i]});
  base_lr_ = config_.optimizer.kind == OptimizerKind::kSgd ? config_.optimizer.sgd.lr : config_.optimizer.adam.lr;
  if (config_.optimizer.kind == OptimizerKind::kSgd) validate(config_.optimizer.sgd);
  else validate(config_.optimizer.adam);
}

float TrainingSession::train_step(const std::vector<Tensor>& inputs) {
  // Stale gradients are overwritten below: letting go of them first lets the run write the
  // gradient outputs into last step's storage (Session reuses outputs nobody else holds) rather
  // than allocate new ones every step.
  if (grads_stale_)
    for (Tensor& g : grads_) g = Tensor();
  std::vector<Tensor> out = train_session_->run(inputs);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& g = out[num_forward_outputs_ + i];
    if (grads_stale_ || !grads_[i].defined()) grads_[i] = std::move(g);
    else accumulate_grad(grads_[i], g, param_names_[i]);
  }
  grads_stale_ = false;
  has_grads_ = true;
  return static_cast<float>(out[static_cast<size_t>(loss_index_)].to_double(0));
}

std::vector<Tensor> TrainingSession::eval_step(const std::vector<Tensor>& inputs) {
  return eval_session_->run(inputs);
}

double TrainingSession::learning_rate() const { return base_lr_ * config_.schedule.factor(step_); }

void TrainingSession::set_learning_rate(double lr) {
  if (!(lr >= 0)) throw InvalidModel(fmt("training: learning rate must be >= 0, got ", lr));
  base_lr_ = lr;
}

void TrainingSession::optimizer_step() {
  if (!has_grads_ || grads_stale_)
    throw InvalidModel("training: optimizer_step() needs gradients: call train_step() first");
  const std::vector<ParamSlot>& slots = slots_;
  float scale = 1.f;
  if (config_.optimizer.max_grad_norm > 0) scale = clip_scale(grad_norm(slots), config_.optimizer.max_grad_norm);
  double lr = learning_rate();
  if (config_.optimizer.kind == OptimizerKind::kSgd) {
    SgdOptions o = config_.optimizer.sgd;
    o.lr = lr;
    sgd_step(slots, o, scale);
  } else {
    AdamOptions o = config_.optimizer.adam;
    o.lr = lr;
    adam_step(slots, o, scale);
  }
  ++step_;
  grads_stale_ = true;
}

const Tensor& TrainingSession::parameter(const std::string& name) const {
  auto it = std::find(param_names_.begin(), param_names_.end(), name);
  if (it == param_names_.end()) throw InvalidModel(fmt("'", name, "' is not a trainable parameter"));
  return params_[static_cast<size_t>(it - param_names_.begin())];
}

const Tensor& TrainingSession::gradient(const std::string& name) const {
  parameter(name);
  const Tensor& g = grads_[static_cast<size_t>(std::find(param_names_.begin(), param_names_.end(), name) - param_names_.begin())];
  if (!g.defined()) throw InvalidModel(fmt("no gradient for '", name, "' yet: call train_step() first"));
  return g;
}

CheckpointState TrainingSession::checkpoint() const {
  CheckpointState state;
  for (size_t i = 0; i < params_.size(); ++i) {
    state.parameters[param_names_[i]] = params_[i].clone();
    OptimizerState s = states_[i];
    for (Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq, &s.momentum_buffer})
      if (t->defined()) *t = t->clone();
    state.optimizer_states[param_names_[i]] = s;
  }
  state.step = step_;
  state.properties["learning_rate"] = base_lr_;
  return state;
}

void TrainingSession::load_checkpoint(const CheckpointState& state) {
  // Check everything first so a mismatch leaves the session untouched.
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = state.parameters.find(param_names_[i]);
    if (it == state.parameters.end()) throw InvalidModel(fmt("checkpoint has no parameter '", param_names_[i], "'"));
    if (it->second.dtype() != params_[i].dtype() || it->second.dims() != params_[i].dims())
      throw ShapeError(fmt("checkpoint parameter '", param_names_[i], "' is ", describe(it->second),
                           ", the model's is ", describe(params_[i])));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& src = state.parameters.at(param_names_[i]);
    std::memcpy(params_[i].raw(), src.raw(), src.nbytes());  // in place: sessions keep their bindings
    auto s = state.optimizer_states.find(param_names_[i]);
    states_[i] = s == state.optimizer_states.end() ? OptimizerState{} : s->second;
  }
  step_ = state.step;
  if (auto lr = state.properties.find("learning_rate"); lr != state.properties.end())
    if (const double* v = std::get_if<double>(&lr->second)) base_lr_ = *v;
  grads_stale_ = true;
  has_grads_ = false;
}

void TrainingSession::export_inference_model(const std::filesystem::path& path,
                                             const std::vector<std::string>& outputs) const {
  std::vector<const Value*> wanted;
  for (const std::string& name : outputs) {
    const Value* v = graph_->find_value(name);
    if (!v) throw InvalidModel(fmt("export: '", name, "' is not a value of the graph"));
    wanted.push_back(v);
  }
  std::vector<const Node*> nodes = nodes_for(*graph_, wanted);
  std::unordered_set<const Value*> read;
  for (const Node* n : nodes)
    for (const Value* v : n->inputs()) read.insert(v);
  std::vector<const Value*> inputs;
  for (const Value* v : graph_->inputs())
    if (read.count(v) || std::find(wanted.begin(), wanted.end(), v) != wanted.end()) inputs.push_back(v);
  auto inference = extract_subgraph(*graph_, nodes, inputs, wanted, graph_->name.empty() ? "trained" : graph_->name);
  export_onnx(*inference, path.string());
}

}  // namespace trainrt
