#include "trainrt/runtime/session.h"

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/core/logging.h"
#include "trainrt/core/thread_scratch.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/runtime/bf16_widening.h"
#include "trainrt/runtime/control_flow_kernels.h"

namespace trainrt {
namespace {

// SplitMix64 finalizer: decorrelates (seed, run, step) into a per-node random seed.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void signature_of(const std::vector<Tensor>& inputs, const std::vector<size_t>& value_positions,
                  std::vector<int64_t>& key) {
  key.clear();
  for (const Tensor& t : inputs) {
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(t.rank());
    key.insert(key.end(), t.dims().begin(), t.dims().end());
  }
  for (size_t i : value_positions) {
    if (i >= inputs.size() || inputs[i].dtype() != DType::kI64) continue;  // run() reports the mismatch
    key.insert(key.end(), inputs[i].data<int64_t>(), inputs[i].data<int64_t>() + inputs[i].numel());
  }
}

// The slot holding the storage slot `s` shows: the end of its chain of views and of outputs written
// over other outputs (kOverOutput).
int storage_slot(const ExecutionPlan& plan, int s) {
  while (plan.slots[static_cast<size_t>(s)].kind == SlotKind::kView ||
         plan.slots[static_cast<size_t>(s)].kind == SlotKind::kOverOutput)
    s = plan.slots[static_cast<size_t>(s)].view_of;
  return s;
}

const Tensor& viewed_tensor(const ExecutionPlan& plan, int s) {
  return plan.slots[static_cast<size_t>(storage_slot(plan, s))].tensor;
}

// What the caller gets of the output in slot `s`: storage produced this run is handed over (a
// view shares it with the value it views); an output left in the arena (PlanOptions::arena_outputs)
// is a view of its bytes that keeps the arena's block alive; inputs and constants are copied so the
// caller never aliases engine-owned or its own input memory unexpectedly, but for a donated input
// written over by the output (ExecutionPlan::inputs_under_outputs), whose own storage (in `inputs`)
// it gets.
Tensor handed_over(const ExecutionPlan& plan, int s, const std::vector<Tensor>& inputs, const Arena& arena) {
  const Slot& slot = plan.slots[static_cast<size_t>(s)];
  if (slot.kind == SlotKind::kOutput) return slot.tensor;
  if (plan.slots[static_cast<size_t>(storage_slot(plan, s))].kind == SlotKind::kArena)
    return Tensor::view(slot.tensor.dtype(), slot.tensor.dims(), const_cast<void*>(slot.tensor.raw()), arena.block());
  if (slot.kind == SlotKind::kView || slot.kind == SlotKind::kOverOutput) {
    const int storage = storage_slot(plan, s);  // through views and outputs written over others
    for (size_t i : plan.inputs_under_outputs)
      if (plan.input_slots[i] == storage) return inputs[i].reshaped(slot.tensor.dims());
    return plan.slots[static_cast<size_t>(storage)].tensor.reshaped(slot.tensor.dims());
  }
  return slot.tensor.clone();
}

}  // namespace

Session::Session(std::shared_ptr<Graph> graph, SessionOptions options)
    : graph_(std::move(graph)), options_(std::move(options)),
      kernels_(options_.kernels ? options_.kernels : &runtime_kernel_table()),
      arena_(options_.arena ? options_.arena : std::make_shared<Arena>()) {
  TRAINRT_CHECK(graph_ != nullptr);
  widen_bf16_without_kernel(*graph_, *kernels_);  // mixed precision: ops with no bf16 kernel run in f32
  for (const std::string& name : options_.mutable_initializers) {
    Value* v = graph_->find_value(name);
    if (!v || !v->is_initializer())
      throw InvalidModel(fmt("mutable initializer '", name, "' is not an initializer of the graph"));
    mutable_data_[name] = v->data;
  }
  for (const std::string& name : options_.value_inputs) {
    const auto& inputs = graph_->inputs();
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Value* v) { return v->name == name; });
    if (it == inputs.end()) throw InvalidModel(fmt("value input '", name, "' is not an input of the graph"));
    if ((*it)->dtype != DType::kI64)
      throw InvalidModel(fmt("value input '", name, "' is ", dtype_name((*it)->dtype), ", expected i64 (a shape)"));
    value_input_positions_.push_back(static_cast<size_t>(it - inputs.begin()));
  }
  for (const ConsumedOutput& c : options_.consumed_outputs) {  // a name no output has: the plan reports it
    const auto& outputs = graph_->outputs();
    auto it = std::find_if(outputs.begin(), outputs.end(), [&](const Value* v) { return v->name == c.output; });
    consumed_positions_.push_back(static_cast<size_t>(it - outputs.begin()));
  }
  profiler_.enable(options_.profile);
}

std::vector<std::string> Session::input_names() const {
  std::vector<std::string> out;
  for (const Value* v : graph_->inputs()) out.push_back(v->name);
  return out;
}

std::vector<std::string> Session::output_names() const {
  std::vector<std::string> out;
  for (const Value* v : graph_->outputs()) out.push_back(v->name);
  return out;
}

void Session::set_initializer(const std::string& name, const Tensor& data) {
  auto it = mutable_data_.find(name);
  if (it == mutable_data_.end())
    throw InvalidModel(fmt("'", name, "' is not a mutable initializer of this session"));
  if (data.dtype() != it->second.dtype() || data.dims() != it->second.dims())
    throw ShapeError(fmt("initializer '", name, "' is ", describe(it->second), ", got ", describe(data)));
  it->second = data;
}

// The plan for these inputs and the row blocks `consumer` takes of each consumed output.
ExecutionPlan& Session::plan_for(const std::vector<Tensor>& inputs, const OutputConsumer* consumer) {
  signature_of(inputs, value_input_positions_, key_scratch_);
  for (const Tensor& t : inputs) key_scratch_.push_back(arena_->offset_of(t.raw()));  // -1: not in the arena
  for (size_t position : consumed_positions_)
    key_scratch_.push_back(consumer && position < graph_->outputs().size()
                               ? static_cast<int64_t>(consumer->row_block_bytes(position))
                               : 0);
  if (dim_bounds_grew_) {  // plan again: values of the grown dims then fit their arena blocks
    if (last_plan_) release_outputs(*last_plan_);
    plans_.clear();
    last_plan_ = nullptr;
    dim_bounds_grew_ = false;
  }
  if (last_plan_ && key_scratch_ == last_key_) return *last_plan_;
  auto it = plans_.find(key_scratch_);
  if (it == plans_.end()) {
    PlanOptions po;
    po.mutable_initializers = options_.mutable_initializers;
    po.value_inputs = options_.value_inputs;
    po.donated_inputs = options_.donated_inputs;
    po.row_selections = options_.row_selections;
    po.consumed_outputs = options_.consumed_outputs;
    po.dim_bounds = dim_bounds_;
    po.arena_outputs = options_.arena_outputs;
    po.arena_floor_bytes = arena_->capacity();  // the block a program sharing it (the forward) reserved
    for (size_t i = 0; i < inputs.size() && i < graph_->inputs().size(); ++i)
      if (const int64_t offset = arena_->offset_of(inputs[i].raw()); offset >= 0)
        po.inputs_in_arena[graph_->inputs()[i]->name] = static_cast<size_t>(offset);
    for (size_t c = 0; c < consumed_positions_.size(); ++c)
      po.consume_row_block_bytes[options_.consumed_outputs[c].output] =
          static_cast<size_t>(key_scratch_[key_scratch_.size() - consumed_positions_.size() + c]);
    auto plan = build_execution_plan(*graph_, inputs, *kernels_, po);
    TRAINRT_LOG(kVerbose) << "planned graph '" << graph_->name << "': " << plan->steps.size()
                          << " steps, " << plan->stats.arena_bytes << " arena bytes";
    it = plans_.emplace(key_scratch_, std::move(plan)).first;
  }
  last_key_ = key_scratch_;
  if (last_plan_ && last_plan_ != it->second.get()) release_outputs(*last_plan_);
  last_plan_ = it->second.get();
  bound_arena_ = nullptr;  // rebind arena views for this plan
  return *last_plan_;
}

// Points every slot at its memory for this run: inputs, mutable initializers, arena views.
void Session::bind(ExecutionPlan& plan, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& t = plan.slots[static_cast<size_t>(plan.input_slots[i])].tensor;
    t.rebind(const_cast<void*>(inputs[i].raw()), inputs[i].dims());
  }
  for (Slot& s : plan.slots) {
    if (s.kind == SlotKind::kMutable) s.tensor = mutable_data_.at(s.value->name);
    if (s.kind == SlotKind::kOverInput)  // the donated input (bound above) is written over
      s.tensor.rebind(static_cast<std::byte*>(const_cast<void*>(plan.slots[static_cast<size_t>(s.view_of)].tensor.raw())) +
                          s.arena_offset,
                      s.tensor.dims());
  }
  // A session sharing the arena may have moved it since this plan was bound: compare the base.
  arena_->reserve(plan.stats.arena_bytes);
  if (bound_arena_ != arena_->base()) {
    for (Slot& s : plan.slots)
      if (s.kind == SlotKind::kArena) s.tensor.rebind(arena_->base() + s.arena_offset, s.tensor.dims());
    bound_arena_ = arena_->base();
  }
}

void Session::infer_at_run_time(PlanStep& step, ExecutionPlan& plan) {
  if (step.schema->sizes_outputs_when_run) {  // the kernel allocates what the plan could not size
    for (int s : step.outputs) {
      if (s < 0) continue;
      Slot& slot = plan.slots[static_cast<size_t>(s)];
      if (slot.kind == SlotKind::kDynamic || slot.kind == SlotKind::kOutput) slot.tensor = Tensor();
    }
    return;
  }
  const Node& node = *step.node;
  std::vector<Shape> shapes(step.inputs.size());
  std::vector<InferenceContext::Input> in(step.inputs.size());
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    if (step.inputs[i] < 0) continue;
    const Tensor& t = plan.slots[static_cast<size_t>(step.inputs[i])].tensor;
    shapes[i] = Shape::of(t.dims());
    in[i] = {t.dtype(), &shapes[i], &t};
  }
  InferenceContext ctx(node, std::move(in));
  infer_node(*step.schema, ctx);
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    if (step.outputs[o] < 0) continue;
    Slot& slot = plan.slots[static_cast<size_t>(step.outputs[o])];
    if (slot.kind != SlotKind::kDynamic && slot.kind != SlotKind::kOutput) continue;
    const auto& out = ctx.output(static_cast<int>(o));
    if (!out.shape.is_static())
      throw ShapeError(fmt(node.describe(), ": output ", o, " has no concrete shape at run time"));
    const bool reusable = slot.kind == SlotKind::kOutput && slot.tensor.sole_owner() &&
                          slot.tensor.dtype() == out.dtype && Shape::of(slot.tensor.dims()) == out.shape;
    const std::vector<int64_t> dims = out.shape.concrete();
    for (size_t d = 0; d < slot.dim_symbols.size() && d < dims.size(); ++d) {
      if (slot.dim_symbols[d].empty()) continue;
      int64_t& bound = dim_bounds_.try_emplace(slot.dim_symbols[d], 0).first->second;
      if (dims[d] > bound) bound = dims[d], dim_bounds_grew_ = true;
    }
    if (slot.kind == SlotKind::kDynamic && slot.bound_bytes >= dtype_size(out.dtype) * static_cast<size_t>(numel_of(dims))) {
      slot.tensor = Tensor::view(out.dtype, dims, arena_->base() + slot.arena_offset);  // its planned block
      continue;
    }
    if (!reusable) slot.tensor = Tensor::empty(out.dtype, dims);
    if (slot.kind == SlotKind::kDynamic) dynamic_bytes_ += slot.tensor.nbytes();
  }
}

// After a kernel that sized its own outputs: each one it had to allocate is there, and counted.
void Session::count_kernel_sized(const PlanStep& step, const ExecutionPlan& plan) {
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    if (step.outputs[o] < 0) continue;
    const Slot& slot = plan.slots[static_cast<size_t>(step.outputs[o])];
    if (!slot.tensor.defined())
      throw InternalError(fmt(step.node->describe(), ": its kernel left output ", o, " without storage"));
    if (slot.kind == SlotKind::kDynamic && step.needs_runtime_inference) dynamic_bytes_ += slot.tensor.nbytes();
  }
}

void Session::run_step(PlanStep& step, int index, ExecutionPlan& plan, int64_t row_begin, int64_t row_end) {
  if (step.needs_runtime_inference) infer_at_run_time(step, plan);
  for (size_t i = 0; i < step.inputs.size(); ++i)
    step.input_ptrs[i] = step.inputs[i] < 0 ? nullptr : &plan.slots[static_cast<size_t>(step.inputs[i])].tensor;
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    if (step.outputs[o] < 0) {
      step.output_ptrs[o] = nullptr;
      continue;
    }
    Slot& slot = plan.slots[static_cast<size_t>(step.outputs[o])];
    // Graph outputs with static dims get their storage now (dynamic ones got it above): last
    // run's, when the caller has let go of it (no fresh pages to fault in), else fresh.
    if (slot.kind == SlotKind::kOutput && !step.needs_runtime_inference && !slot.tensor.sole_owner())
      slot.tensor = Tensor::empty(slot.tensor.dtype(), slot.tensor.dims());
    if (slot.kind == SlotKind::kOverOutput)  // the intermediate it is written over got storage this run
      slot.tensor.rebind(const_cast<void*>(viewed_tensor(plan, slot.view_of).raw()), slot.tensor.dims());
    step.output_ptrs[o] = &slot.tensor;
  }
  KernelContext ctx;
  ctx.inputs = step.input_ptrs;
  ctx.outputs = step.output_ptrs;
  ctx.pool = options_.threads;
  ctx.random_seed = mix(options_.seed ^ mix(run_counter_ * 1000003ull + static_cast<uint64_t>(index)));
  ctx.row_begin = row_begin;
  ctx.row_end = row_end;
  if (!profiler_.enabled()) {
    step.kernel(ctx);
    if (step.schema->sizes_outputs_when_run) count_kernel_sized(step, plan);
    return;
  }
  int64_t start = profiler_.now_us();
  step.kernel(ctx);
  int64_t end = profiler_.now_us();
  if (step.schema->sizes_outputs_when_run) count_kernel_sized(step, plan);
  std::string shapes;
  for (Tensor* t : step.output_ptrs) {
    if (!t) continue;
    if (!shapes.empty()) shapes += ' ';
    shapes += describe(*t);
  }
  profiler_.record({step.node->name(), step.node->op_type(), start, end - start, shapes, storage_bytes().live});
}

// Step `index` makes its output 0 (the slot of `point`) block_rows rows at a time in the block of
// arena bytes the plan gave it, and hands each block to the consumer before making the next.
void Session::run_step_in_blocks(PlanStep& step, int index, ExecutionPlan& plan, const ConsumePoint& point,
                                 OutputConsumer& consumer) {
  Tensor& out = plan.slots[static_cast<size_t>(point.slot)].tensor;
  void* bytes = out.raw();
  block_dims_ = out.dims();  // reuses block_dims_'s storage after the first run
  const int64_t rows = block_dims_[0];
  for (int64_t r0 = 0; r0 < rows; r0 += point.block_rows) {
    const int64_t r1 = std::min(rows, r0 + point.block_rows);
    block_dims_[0] = r1 - r0;
    out.rebind(bytes, block_dims_);
    run_step(step, index, plan, r0, r1);
    consumer.consume_rows(point.output, out, r0);
  }
  block_dims_[0] = rows;
  out.rebind(bytes, block_dims_);
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs, OutputConsumer* consumer) {
  return run_impl(inputs, consumer, nullptr);
}

std::vector<Tensor> Session::run_releasing(std::vector<Tensor>& inputs, OutputConsumer* consumer) {
  return run_impl(inputs, consumer, &inputs);
}

// `releasing`: the caller's input vector, whose donated entries are reset at their release points.
std::vector<Tensor> Session::run_impl(const std::vector<Tensor>& inputs, OutputConsumer* consumer,
                                      std::vector<Tensor>* releasing) {
  if (!options_.consumed_outputs.empty() && !consumer)
    throw InvalidModel(fmt("graph '", graph_->name, "': ", options_.consumed_outputs.size(), " outputs (the first '",
                           options_.consumed_outputs.front().output,
                           "') are consumed during the run, but run() got no consumer"));
  // The kernels' per-thread scratch is dropped when the run ends, also by an error (thread_scratch.h).
  struct ReleaseScratch {
    ~ReleaseScratch() { release_thread_scratch(); }
  } release_scratch;
  // Tensors an earlier run handed over in the arena's bytes and someone still holds (a forward's
  // saved values before their backward) are read in place by a run that gets them as inputs, which
  // plans around them; any other run leaves them be and takes a fresh block.
  if (arena_->in_use_elsewhere() &&
      std::none_of(inputs.begin(), inputs.end(), [&](const Tensor& t) { return arena_->offset_of(t.raw()) >= 0; }))
    arena_->detach();
  ExecutionPlan& plan = plan_for(inputs, consumer);
  bind(plan, inputs);
  dynamic_bytes_ = 0;
  peak_dynamic_bytes_ = 0;
  // Consume points come sorted by step; `next` is the first not yet handed over. One in row blocks
  // was handed over by its step.
  size_t next = 0;
  auto consume_through = [&](int step) {
    for (; next < plan.consume_points.size() && plan.consume_points[next].after_step <= step; ++next) {
      const ConsumePoint& c = plan.consume_points[next];
      if (c.block_rows > 0) continue;  // handed over by its step
      if (plan.output_kept[c.output]) consumer->consume(c.output, handed_over(plan, c.slot, inputs, *arena_));
      else consumer->consume(c.output, plan.slots[static_cast<size_t>(c.slot)].tensor);
    }
  };
  auto blocked_at = [&](int step) -> const ConsumePoint* {
    for (size_t c = next; c < plan.consume_points.size() && plan.consume_points[c].after_step == step; ++c)
      if (plan.consume_points[c].block_rows > 0) return &plan.consume_points[c];
    return nullptr;
  };
  size_t released = 0;
  auto release_through = [&](int step) {
    if (!releasing) return;
    for (; released < plan.input_releases.size() && plan.input_releases[released].first <= step; ++released)
      (*releasing)[plan.input_releases[released].second] = Tensor();
  };
  size_t dynamic_released = 0;
  auto release_dynamic_through = [&](int step) {
    for (; dynamic_released < plan.dynamic_releases.size() && plan.dynamic_releases[dynamic_released].first <= step;
         ++dynamic_released) {
      Slot& slot = plan.slots[static_cast<size_t>(plan.dynamic_releases[dynamic_released].second)];
      const auto* bytes = static_cast<const std::byte*>(slot.tensor.raw());
      const bool in_arena = bytes >= arena_->base() && bytes < arena_->base() + arena_->capacity();
      if (slot.kind == SlotKind::kDynamic && !in_arena) dynamic_bytes_ -= slot.tensor.nbytes();
      slot.tensor = Tensor();
    }
  };
  consume_through(-1);
  release_through(-1);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    try {
      if (const ConsumePoint* point = blocked_at(static_cast<int>(i)))
        run_step_in_blocks(plan.steps[i], static_cast<int>(i), plan, *point, *consumer);
      else
        run_step(plan.steps[i], static_cast<int>(i), plan);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw InternalError(fmt(plan.steps[i].node->describe(), ": ", e.what()));
    }
    consume_through(static_cast<int>(i));
    release_through(static_cast<int>(i));
    peak_dynamic_bytes_ = std::max(peak_dynamic_bytes_, dynamic_bytes_);
    release_dynamic_through(static_cast<int>(i));
  }
  ++run_counter_;
  std::vector<Tensor> outputs;
  outputs.reserve(plan.output_slots.size());
  for (size_t o = 0; o < plan.output_slots.size(); ++o) {
    if (plan.output_consumed[o]) outputs.emplace_back();  // handed to the consumer during the run
    else outputs.push_back(handed_over(plan, plan.output_slots[o], inputs, *arena_));
  }
  // Output slots keep a reference to what they handed over, to write it again next run if the
  // caller has released it by then; dynamic intermediates are released now.
  for (Slot& slot : plan.slots)
    if (slot.kind == SlotKind::kDynamic) slot.tensor = Tensor();
  return outputs;
}

void Session::forget_outputs(size_t first) {
  if (!last_plan_) return;
  for (size_t o = first; o < last_plan_->output_slots.size(); ++o) {
    // The storage the output shows: its own, or that of the value it views or is written over.
    Slot& slot = last_plan_->slots[static_cast<size_t>(storage_slot(*last_plan_, last_plan_->output_slots[o]))];
    if (slot.kind == SlotKind::kOutput) slot.tensor = Tensor::view(slot.tensor.dtype(), slot.tensor.dims(), nullptr);
  }
}

void Session::set_arena_outputs(std::set<std::string> names) {
  options_.arena_outputs = std::move(names);
  if (last_plan_) release_outputs(*last_plan_);
  plans_.clear();
  last_plan_ = nullptr;
}

// Another plan runs next: the outputs this one kept for reuse are let go, so the memory kept is
// one run's outputs at most, however many shapes come and go.
void Session::release_outputs(ExecutionPlan& plan) {
  for (Slot& slot : plan.slots)
    if (slot.kind == SlotKind::kOutput) slot.tensor = Tensor::view(slot.tensor.dtype(), slot.tensor.dims(), nullptr);
}

const PlanStats& Session::last_stats() const {
  static const PlanStats kNone;
  return last_plan_ ? last_plan_->stats : kNone;
}

MemoryStats Session::memory_stats() const {
  MemoryStats m;
  m.planned_arena_bytes = last_stats().arena_bytes;
  m.live_lower_bound = last_stats().live_lower_bound;
  m.arena_capacity = arena_->capacity();
  m.peak_dynamic_bytes = peak_dynamic_bytes_;
  if (last_plan_)
    for (const Slot& slot : last_plan_->slots)
      if (slot.kind == SlotKind::kOutput && slot.tensor.raw()) m.output_bytes += slot.tensor.nbytes();
  return m;
}

}  // namespace trainrt
