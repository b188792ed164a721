#include "trainrt/train/module_programs.h"

#include <algorithm>
#include <unordered_map>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/core/error.h"
#include "trainrt/core/logging.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/common_subexpression_elimination.h"
#include "trainrt/passes/gradient_sum_chain.h"
#include "trainrt/passes/graph_edit.h"
#include "trainrt/passes/label_sparsity.h"
#include "trainrt/passes/linear_cross_entropy_fusion.h"
#include "trainrt/passes/low_precision_compute.h"
#include "trainrt/passes/matmul_bias_fusion.h"
#include "trainrt/passes/product_cast_fusion.h"
#include "trainrt/passes/padding_elimination.h"
#include "trainrt/passes/scatter_accumulation.h"
#include "trainrt/passes/transpose_into_product.h"
#include "trainrt/passes/weight_gradients_early.h"
#include "trainrt/passes/zero_input_elimination.h"
#include "trainrt/plan/checkpoint_recompute.h"
#include "trainrt/plan/recompute_subgraphs.h"
#include "trainrt/plan/saved_values.h"
#include "trainrt/train/codegen_fusion.h"
#include "trainrt/train/low_precision_graph.h"

namespace trainrt {
namespace {

std::vector<const Value*> const_values(const std::vector<Value*>& v) { return {v.begin(), v.end()}; }

// Whether `v` is shape arithmetic: made from Shape or Size outputs and constants only (a Reshape's
// target (batch, seq, heads, dim) gathered and concatenated from the input's shape), never from a
// tensor's data, so its value is fixed by the input dims a plan is keyed on. `known` memoizes.
bool is_shape_arithmetic(const Value* v, std::unordered_map<const Value*, bool>& known) {
  if (v->is_initializer()) return true;
  const Node* p = v->producer;
  if (!p) return false;  // a graph input: data
  if (p->op_type() == "Shape" || p->op_type() == "Size") return true;
  if (p->num_inputs() == 0) return p->op_type() == "Constant";  // not a random op's draw
  if (auto it = known.find(v); it != known.end()) return it->second;
  known[v] = false;  // a cycle cannot occur in a DAG; this only bounds the walk
  const bool all = std::all_of(p->inputs().begin(), p->inputs().end(), [&](const Value* in) {
    return !in || is_shape_arithmetic(in, known);
  });
  return known[v] = all;
}

// Whether the two tensors' bytes overlap (one views the other, or they share storage in part).
bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const std::byte*>(a.raw());
  const auto* pb = static_cast<const std::byte*>(b.raw());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// Rewrites of the forward graph before autodiff; each fused op's gradient rule builds its backward.
const PassPipeline& forward_passes() {
  static const PassPipeline pipeline = [] {
    PassPipeline p;
    p.add(std::make_unique<CommonSubexpressionElimination>());
    p.add(std::make_unique<MatMulBiasFusion>());
    p.add(std::make_unique<TransposeIntoProduct>());
    return p;
  }();
  return pipeline;
}

// Rewrites of the backward program: each gradient's parts summed as they come, a tied embedding's
// scatter onto the other parts, a bf16 product's widening Cast folded into it, each weight
// gradient's product as soon as its operands exist.
const PassPipeline& backward_passes() {
  static const PassPipeline pipeline = [] {
    PassPipeline p;
    p.add(std::make_unique<GradientSumChain>());
    p.add(std::make_unique<ScatterAccumulation>());
    p.add(std::make_unique<ProductCastFusion>());
    p.add(std::make_unique<WeightGradientsEarly>());
    return p;
  }();
  return pipeline;
}

}  // namespace

ModulePrograms::ModulePrograms(std::shared_ptr<Graph> graph, std::vector<std::string> grad_outputs,
                               std::vector<std::string> wrt, bool profile, bool optimize,
                               const MemoryRequest& memory, bool label_sparsity, bool padding_elimination,
                               std::optional<CodegenOptions> codegen)
    : graph_(std::move(graph)), grad_outputs_(std::move(grad_outputs)), wrt_(std::move(wrt)),
      label_sparsity_(optimize && label_sparsity) {
  std::vector<const Node*> nodes;
  for (const Node* n : graph_->topological_order()) nodes.push_back(n);
  joint_ = extract_subgraph(*graph_, nodes, const_values(graph_->inputs()), const_values(graph_->outputs()),
                            graph_->name);
  num_outputs_ = graph_->outputs().size();
  LowPrecisionCompute().apply(*joint_);
  infer_graph_shapes(*joint_);  // the passes match on dims
  if (optimize) forward_passes().run(*joint_, &forward_pass_report_);
  // The sparse optimizers join the pass report, each with the nodes it took (negative: added).
  const auto report = [&](const Pass& pass, Graph& graph, std::string_view where = "") {
    const int64_t before = graph.num_nodes();
    const bool changed = pass.apply(graph);
    forward_pass_report_.push_back({std::string(pass.name()) + std::string(where), changed, before - graph.num_nodes()});
  };
  if (optimize && padding_elimination) {
    PaddingElimination pass;
    report(pass, *joint_);
    padding_elimination_ = pass.last_reason();
    padding_row_flops_ = pass.row_flops();
  }
  if (label_sparsity_) {
    for (const Node* n : joint_->nodes()) sparse_losses_ -= n->op_type() == "ValidRows";
    report(LabelSparsity(), *joint_);
    for (const Node* n : joint_->nodes()) sparse_losses_ += n->op_type() == "ValidRows";
  }
  if (optimize) row_selection_ = hoist_row_selections(*joint_);
  sink_to_first_reader(*joint_);  // autocast's weight casts: each made where it is read
  GradientResult result = build_gradients(*joint_, {.outputs_with_grad = grad_outputs_, .wrt = wrt_});
  output_grad_inputs_ = result.output_grad_inputs;
  unreached_ = result.unreached;
  const RecomputeRequest recompute = layer_recompute(memory, result.forward_nodes);
  layers_recomputed_ = recompute.layers_recomputed;
  if (optimize) {
    nodes_recomputed_ = choose_saved_values(*joint_, result, recompute.regions, recompute.kept).checkpoint_recomputed;
  } else {
    nodes_recomputed_ = recompute_checkpoint_regions(*joint_, result, recompute.regions, recompute.kept);
  }
  recompute_patterns_ = recompute_subgraphs(*joint_, result, memory.config, /*cheap_by_default=*/optimize);
  programs_ = partition_joint_graph(*joint_, result);
  if (label_sparsity_) RowScatterPushdown().apply(*programs_.backward);
  // The head's product, loss and loss gradient (rule 7 put them in the forward) by row blocks.
  if (optimize) report(LinearCrossEntropyFusion(), *programs_.forward, " (forward)");
  if (optimize) {
    std::vector<PassOutcome> outcomes;
    backward_passes().run(*programs_.backward, &outcomes);
    for (PassOutcome& o : outcomes) o.pass += " (backward)";
    forward_pass_report_.insert(forward_pass_report_.end(), outcomes.begin(), outcomes.end());
  }
  if (optimize && codegen) {
    // The output gradients may come as zeros: their readers stay ops ZeroInputElimination knows.
    std::vector<PassOutcome> fused = fuse_elementwise_with_codegen(
        {{programs_.forward.get(), {}},
         {programs_.backward.get(), {output_grad_inputs_.begin(), output_grad_inputs_.end()}}},
        *codegen);
    fused[1].pass += " (backward)";
    forward_pass_report_.insert(forward_pass_report_.end(), fused.begin(), fused.end());
  }
  // Backward outputs come in grad_of order (sorted by name); map each wrt entry to its position.
  std::vector<std::string> order;
  for (const auto& [name, grad] : result.grad_of) order.push_back(name);
  for (const std::string& w : wrt_)
    grad_position_.push_back(static_cast<size_t>(std::find(order.begin(), order.end(), w) - order.begin()));
  wrt_of_output_.resize(order.size());
  for (size_t w = 0; w < wrt_.size(); ++w) wrt_of_output_[grad_position_[w]] = w;
  // Forward, backward and inference never run at the same time: one block, as large as the largest
  // of the three, instead of three held all the time. The forward leaves its saved values in it,
  // in bytes its late intermediates leave free, and the backward reads them there and plans its
  // own values around them until each is dead (SessionOptions::arena_outputs): the step's
  // intermediates and saved values share the block. Another forward before the backward (or an
  // inference call) takes a fresh block and leaves the saved values where they are.
  SessionOptions options;
  options.profile = profile;
  arena_ = options.arena = std::make_shared<Arena>();
  const std::vector<std::string> selections = row_selections();  // every row when no label is ignored: views
  options.row_selections = {selections.begin(), selections.end()};
  SessionOptions forward_options = options;
  // Shapes the forward hands over (choose_saved_values), and shape arithmetic on them (a recomputed
  // Reshape's target), are planned for like constants, so the backward's Reshapes keep static dims
  // (views, arena buffers; no run-time sizing).
  std::unordered_map<const Value*, bool> shape_arithmetic;
  for (const std::string& name : programs_.backward_inputs)
    if (const Value* v = joint_->find_value(name);
        v->dtype == DType::kI64 && v->shape.rank_known && v->shape.rank() <= 1 && is_shape_arithmetic(v, shape_arithmetic))
      options.value_inputs.insert(name);  // a shape, not a mask made from shapes (a causal mask)
  // The saved values (forward outputs past the model's) are the backward's alone: it may write
  // over each once its last reader has run (see backward() for the bytes they might share).
  const auto& forward_outputs = programs_.forward->outputs();
  for (size_t i = num_outputs_; i < forward_outputs.size(); ++i)
    if (!options.value_inputs.count(forward_outputs[i]->name)) donated_.insert(forward_outputs[i]->name);
  for (size_t i = 0; i < num_outputs_; ++i) donated_.erase(forward_outputs[i]->name);
  for (const Value* v : programs_.forward->inputs()) donated_.erase(v->name);
  options.donated_inputs = donated_;
  forward_options.arena_outputs = donated_;
  forward_ = std::make_unique<Session>(programs_.forward, forward_options);
  backward_options_ = options;
  const std::set<std::string> read(programs_.backward_inputs.begin(), programs_.backward_inputs.end());
  for (size_t i = 0; i < graph_->inputs().size(); ++i)  // the caller's inputs, not the row selections
    if (read.count(programs_.forward->inputs()[i]->name)) inputs_read_.push_back(i);
  if (row_selection_.graph) row_selection_session_ = std::make_unique<Session>(row_selection_.graph, SessionOptions{});
  for (size_t i = 0; i < num_outputs_; ++i) output_is_read_.push_back(read.count(forward_outputs[i]->name) > 0);
  backward_ = std::make_unique<Session>(programs_.backward, options);
  last_backward_ = backward_.get();
  SessionOptions inference_options;
  inference_options.arena = options.arena;
  inference_ = std::make_unique<Session>(low_precision_graph(graph_), inference_options);
}

std::vector<std::string> ModulePrograms::row_selections() const {
  std::vector<std::string> names;
  if (row_selection_.graph)
    for (size_t i = 0; i < row_selection_.num_selections; ++i) names.push_back(row_selection_.graph->outputs()[i]->name);
  return names;
}

std::vector<Tensor> ModulePrograms::forward(const std::vector<Tensor>& caller_inputs, ForwardState& state,
                                            uint64_t seed) {
  std::vector<Tensor> with_rows;  // the caller's inputs and the rows the sparse optimizers keep
  if (row_selection_session_) {
    with_rows = caller_inputs;
    std::vector<Tensor> picked;
    for (size_t i : row_selection_.inputs) picked.push_back(caller_inputs.at(i));
    std::vector<Tensor> out = row_selection_session_->run(picked);
    const size_t k = row_selection_.num_selections;
    last_row_counts_.clear();
    for (size_t i = 0; i < k; ++i) {
      last_row_counts_.push_back({row_selection_.graph->outputs()[i]->name, out[i].dims()[0], out[k + i].to_i64_vector()[0]});
      with_rows.push_back(std::move(out[i]));
    }
  }
  const std::vector<Tensor>& inputs = row_selection_session_ ? with_rows : caller_inputs;  // no copy without rows
  forward_->set_seed(seed);
  std::vector<Tensor> out = forward_->run(inputs);
  // The state owns the saved values alone (the outputs after the model's), so that the backward
  // frees each after its last reader.
  forward_->forget_outputs(num_outputs_);
  saved_bytes_ = saved_in_arena_bytes_ = 0;
  for (size_t s = num_outputs_; s < out.size(); ++s) {
    saved_bytes_ += out[s].nbytes();
    if (forward_->arena().offset_of(out[s].raw()) >= 0) saved_in_arena_bytes_ += out[s].nbytes();
  }
  state.values.clear();
  state.used = false;
  const auto& in_values = programs_.forward->inputs();
  for (size_t i = 0; i < inputs.size() && i < in_values.size(); ++i) state.values[in_values[i]->name] = inputs[i];
  const auto& out_values = programs_.forward->outputs();
  for (size_t i = 0; i < out.size(); ++i) state.values[out_values[i]->name] = out[i];
  state.outputs_read.clear();
  for (size_t o = 0; o < num_outputs_; ++o) {
    bool read = output_is_read_[o];
    for (size_t s = num_outputs_; s < out.size() && !read; ++s) read = overlaps(out[s], out[o]);
    if (read) state.outputs_read.push_back(o);
  }
  out.resize(num_outputs_);  // the caller gets the model's outputs; saved values stay in the state
  return out;
}

namespace {

// Hands a backward output to the caller's consumer under its wrt index.
class WrtConsumer : public OutputConsumer {
 public:
  WrtConsumer(OutputConsumer* inner, const std::vector<size_t>& wrt_of_output)
      : inner_(inner), wrt_of_output_(wrt_of_output) {}
  void consume(size_t output, const Tensor& value) override { inner_->consume(wrt_of_output_[output], value); }
  size_t row_block_bytes(size_t output) const override { return inner_->row_block_bytes(wrt_of_output_[output]); }
  void consume_rows(size_t output, const Tensor& rows, int64_t row_begin) override {
    inner_->consume_rows(wrt_of_output_[output], rows, row_begin);
  }

 private:
  OutputConsumer* inner_;
  const std::vector<size_t>& wrt_of_output_;
};

}  // namespace

// The backward session whose consumed outputs are the gradients `consumers` take, each held until
// the backward's last read of its wrt entry (when it reads it: W in dX = dY W^T).
ModulePrograms::BackwardVariant& ModulePrograms::variant(const std::vector<bool>& absent) {
  auto it = variants_.find(absent);
  if (it != variants_.end()) return it->second;
  std::set<std::string> zero;
  for (size_t i = 0; i < absent.size(); ++i)
    if (absent[i]) zero.insert(output_grad_inputs_[i]);
  const Graph& plain = *programs_.backward;
  std::vector<const Node*> nodes;
  for (const Node* n : plain.topological_order()) nodes.push_back(n);
  BackwardVariant v;
  v.graph = extract_subgraph(plain, nodes, const_values(plain.inputs()), const_values(plain.outputs()), plain.name);
  ZeroInputElimination(std::move(zero)).apply(*v.graph);
  if (label_sparsity_) RowScatterPushdown().apply(*v.graph);  // the scatter's readers, now without the zero Sum
  for (const std::string& name : output_grad_inputs_) {
    const Value* input = v.graph->find_value(name);
    v.reads_output_grad.push_back(input && !input->uses.empty());
  }
  v.session = std::make_unique<Session>(v.graph, backward_options_);
  return variants_.emplace(absent, std::move(v)).first->second;
}

Session& ModulePrograms::backward_session(const GradientConsumers& consumers, const std::vector<bool>& absent) {
  const bool plain = std::none_of(absent.begin(), absent.end(), [](bool a) { return a; });
  if (consumers.empty()) return plain ? *backward_ : *variant(absent).session;
  std::vector<std::pair<size_t, bool>> sorted;  // (wrt index, kept)
  for (size_t w : consumers.stepped) sorted.emplace_back(w, false);
  for (size_t w : consumers.handed_over) sorted.emplace_back(w, true);
  std::sort(sorted.begin(), sorted.end());
  if (consuming_backward_ && sorted == consumed_ && absent == consumed_absent_) return *consuming_backward_;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].first >= wrt_.size())
      throw ShapeError(fmt("backward: consumed gradient index ", sorted[i].first, " is out of range (", wrt_.size(),
                           " wrt entries)"));
    if (i > 0 && sorted[i].first == sorted[i - 1].first)
      throw ShapeError(fmt("backward: gradient of '", wrt_[sorted[i].first], "' (index ", sorted[i].first,
                           ") consumed twice"));
  }
  const auto& inputs = programs_.backward_inputs;
  SessionOptions options = backward_options_;
  for (auto [w, kept] : sorted) {
    const bool read = std::find(inputs.begin(), inputs.end(), wrt_[w]) != inputs.end();
    options.consumed_outputs.push_back(
        {programs_.backward->outputs()[grad_position_[w]]->name, read ? wrt_[w] : "", kept});
  }
  if (last_backward_ == consuming_backward_.get()) last_backward_ = backward_.get();
  consuming_backward_.reset();  // its kept output storage goes before the new session takes its own
  consuming_backward_ = std::make_unique<Session>(plain ? programs_.backward : variant(absent).graph, options);
  consumed_ = std::move(sorted);
  consumed_absent_ = absent;
  return *consuming_backward_;
}

std::vector<Tensor> ModulePrograms::backward(ForwardState& state, const std::vector<Tensor>& output_grads,
                                             const GradientConsumers& consumers, bool retain) {
  if (!consumers.empty() && !consumers.consumer)
    throw InvalidModel(fmt("backward: ", consumers.stepped.size() + consumers.handed_over.size(),
                           " gradients are to be consumed, but no consumer was given"));
  if (state.used) throw InvalidModel("backward through the same forward call twice (retain_graph) is not supported");
  if (output_grads.size() != grad_outputs_.size())
    throw ShapeError(fmt("backward got ", output_grads.size(), " output gradients, expected ", grad_outputs_.size()));
  std::vector<bool> absent;
  for (const Tensor& g : output_grads) absent.push_back(!g.defined());
  Session& session = backward_session(consumers, absent);
  const bool plain = std::none_of(absent.begin(), absent.end(), [](bool a) { return a; });
  const std::vector<bool>* reads = plain ? nullptr : &variant(absent).reads_output_grad;
  for (size_t i = 0; i < output_grads.size(); ++i) {
    Tensor g = output_grads[i];
    if (!g.defined()) {  // autograd passes no gradient for an output the loss does not use
      const Tensor& out = state.values.at(grad_outputs_[i]);
      // Zeros where the variant still reads them; bytes never touched (no page faulted in) where not.
      g = !reads || (*reads)[i] ? Tensor::zeros(out.dtype(), out.dims()) : Tensor::empty(out.dtype(), out.dims());
    }
    state.values[output_grad_inputs_[i]] = g;
  }
  std::vector<Tensor> inputs;
  for (const std::string& name : programs_.backward_inputs) {
    auto it = state.values.find(name);
    if (it == state.values.end()) throw InternalError(fmt("backward input '", name, "' was not kept by forward"));
    inputs.push_back(it->second);
  }
  const bool judge = !arena_outputs_judged_ && saved_in_arena_bytes_ > 0 &&
                     std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& t) { return arena_->offset_of(t.raw()) >= 0; });
  const size_t capacity_before = arena_->capacity();
  size_t gradient_bytes = 0;  // only for the judgement, once: not a cost of every step
  if (judge)
    for (const std::string& w : wrt_)
      if (auto it = state.values.find(w); it != state.values.end()) gradient_bytes += it->second.nbytes();
  if (retain) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (donated_.count(programs_.backward_inputs[i])) inputs[i] = inputs[i].clone();
    for (const std::string& name : output_grad_inputs_) state.values.erase(name);
  } else {
    hand_over_saved_values(state, inputs);
    // Spent from here on, even if the run throws: the saved values may be written over.
    state.values.clear();
    state.used = true;
  }
  WrtConsumer wrt_consumer(consumers.consumer, wrt_of_output_);
  last_backward_ = &session;
  // The saved values go as their last readers run (donated: written over or read for the last time).
  std::vector<Tensor> grads = session.run_releasing(inputs, consumers.empty() ? nullptr : &wrt_consumer);
  // The gradients belong to the caller: once it drops them (zero_grad(set_to_none=True)), their
  // memory is free during the next forward, as in eager, rather than kept here for reuse.
  session.forget_outputs(0);
  if (judge) keep_saved_values_in_arena(capacity_before, gradient_bytes);
  std::vector<Tensor> out;
  for (size_t pos : grad_position_) out.push_back(std::move(grads[pos]));
  return out;
}

// Saved values in the arena's idle bytes shrink what the step holds where its peak is the forward's
// end (saved values many, gradients few: a CNN), but when the backward plans around them it may need
// a larger arena, which stays held to the backward's end, where the gradients are all made (a large
// transformer: gradients many): kept only where they pay (SavedValuesInArena). Judged once, at the
// first backward that read saved values in the arena; turned off, the forward plans again without
// and the arena is let go, to be reserved at what the plans need.
void ModulePrograms::keep_saved_values_in_arena(size_t capacity_before, size_t gradient_bytes) {
  arena_outputs_judged_ = true;
  const SavedValuesInArena step{saved_bytes_, saved_in_arena_bytes_, gradient_bytes, capacity_before, arena_->capacity()};
  TRAINRT_LOG(kVerbose) << "graph '" << graph_->name << "': saved values in the arena (" << saved_in_arena_bytes_
                        << " of " << saved_bytes_ << " bytes; arena " << capacity_before << " -> " << arena_->capacity()
                        << " bytes over the backward, gradients " << gradient_bytes << " bytes): step peak about "
                        << step.peak_with() << " against " << step.peak_without() << " without; "
                        << (step.pays() ? "kept" : "turned off");
  if (step.pays()) return;
  arena_outputs_off_ = true;
  forward_->set_arena_outputs({});
  if (!arena_->in_use_elsewhere()) arena_->detach();
}

// A donated saved value must be the only holder of its bytes among what the backward reads and
// what the caller got: a saved value that views a model output (a Reshape of the logits) or that
// shares storage with another saved value is copied first.
void ModulePrograms::hand_over_saved_values(const ForwardState& state, std::vector<Tensor>& inputs) const {
  const auto& forward_outputs = programs_.forward->outputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!donated_.count(programs_.backward_inputs[i])) continue;
    bool shared = false;
    for (size_t j = 0; j < inputs.size() && !shared; ++j) shared = j != i && overlaps(inputs[i], inputs[j]);
    for (size_t o = 0; o < num_outputs_ && !shared; ++o)
      shared = overlaps(inputs[i], state.values.at(forward_outputs[o]->name));
    if (shared) inputs[i] = inputs[i].clone();
  }
}

std::vector<Tensor> ModulePrograms::infer(const std::vector<Tensor>& inputs, uint64_t seed) {
  inference_->set_seed(seed);
  return inference_->run(inputs);
}

}  // namespace trainrt
