// build_execution_plan: walks the graph into the plan's slots and steps (bound inputs and
// initializers, inference, folding, views, graph outputs, consume points); where their bytes lie
// is then plan_memory_assignment's work.
#include "trainrt/runtime/execution_plan.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "trainrt/core/error.h"
#include "trainrt/core/logging.h"
#include "trainrt/passes/pass.h"
#include "trainrt/runtime/plan_memory_assignment.h"

namespace trainrt {
namespace {

// The step of a view (SlotKind::kView) runs no kernel: it points its output at input 0's bytes as
// they are bound in this run, in the output's dims (fixed at plan time).
KernelFn point_view_at_input(int input, std::vector<int64_t> dims) {
  return [input, dims = std::move(dims)](KernelContext& ctx) {
    ctx.out(0).rebind(const_cast<void*>(ctx.in(input).raw()), dims);
  };
}

// What plan-time inference knows about a value.
struct Known {
  DType dtype = DType::kUndefined;
  Shape shape;
  const Tensor* value = nullptr;
};

class PlanBuilder {
 public:
  PlanBuilder(Graph& graph, const KernelTable& table, const PlanOptions& options)
      : graph_(graph), table_(table), options_(options), plan_(std::make_unique<ExecutionPlan>()) {}

  std::unique_ptr<ExecutionPlan> build(const std::vector<Tensor>& inputs) {
    bind_graph_inputs(inputs);
    check_consumed_outputs();
    bind_initializers();
    for (Node* node : graph_.topological_order()) plan_node(*node);
    bind_graph_outputs();
    place_consume_points();
    assign_plan_memory(graph_, options_, *plan_);
    return std::move(plan_);
  }

 private:
  int add_slot(const Value* v, SlotKind kind) {
    Slot s;
    s.kind = kind;
    s.value = v;
    plan_->slots.push_back(std::move(s));
    int index = static_cast<int>(plan_->slots.size()) - 1;
    slot_of_[v] = index;
    return index;
  }

  void bind_graph_inputs(const std::vector<Tensor>& inputs) {
    const auto& declared = graph_.inputs();
    if (inputs.size() != declared.size()) {
      std::string names;
      for (const Value* v : declared) names += (names.empty() ? "" : ", ") + v->name;
      throw ShapeError(fmt("graph '", graph_.name, "' has ", declared.size(), " inputs (", names,
                           "), got ", inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Value* v = declared[i];
      const Tensor& t = inputs[i];
      if (t.dtype() != v->dtype)
        throw ShapeError(fmt("input '", v->name, "' has dtype ", dtype_name(t.dtype()), ", expected ",
                             dtype_name(v->dtype)));
      if (v->shape.rank_known) {
        bool ok = v->shape.rank() == t.rank();
        for (int64_t d = 0; ok && d < t.rank(); ++d) {
          const Dim& dim = v->shape.dims[static_cast<size_t>(d)];
          ok = !dim.is_static() || dim.value == t.dim(d);
        }
        if (!ok)
          throw ShapeError(fmt("input '", v->name, "' has shape ", to_string(t.dims()), ", expected ",
                               to_string(v->shape)));
      }
      int s = add_slot(v, SlotKind::kInput);
      // A view, not a copy of `t`: a copy would share t's storage and keep it alive as long as the
      // plan lives (the first forward's saved values, for the backward program's plan). Every run
      // binds the slot to that run's input anyway.
      plan_->slots[static_cast<size_t>(s)].tensor = Tensor::view(t.dtype(), t.dims(), const_cast<void*>(t.raw()));
      plan_->input_slots.push_back(s);
      const Tensor* value = nullptr;
      if (options_.value_inputs.count(v->name)) {
        plan_->folded.push_back(t.clone());  // the values this plan is built for
        value = &plan_->folded.back();
      }
      known_[v] = {t.dtype(), Shape::of(t.dims()), value};
    }
  }

  void bind_initializers() {
    for (Value* v : graph_.initializers()) {
      if (slot_of_.count(v)) continue;  // a graph input with a default value: the caller binds it
      bool is_mutable = options_.mutable_initializers.count(v->name) > 0;
      int s = add_slot(v, is_mutable ? SlotKind::kMutable : SlotKind::kConstant);
      plan_->slots[static_cast<size_t>(s)].tensor = v->data;
      known_[v] = {v->dtype, Shape::of(v->data.dims()), is_mutable ? nullptr : &v->data};
    }
  }

  InferenceContext infer(const Node& node, const OpSchema& schema) {
    std::vector<InferenceContext::Input> in;
    for (int i = 0; i < node.num_inputs(); ++i) {
      const Value* v = node.input(i);
      InferenceContext::Input x;
      if (v) {
        auto it = known_.find(v);
        if (it == known_.end())
          throw InvalidModel(fmt(node.describe(), ": input ", i, " '", v->name,
                                 "' is not a graph input, an initializer or any node's output"));
        x.dtype = it->second.dtype;
        x.shape = &it->second.shape;
        x.value = it->second.value;
      }
      in.push_back(x);
    }
    InferenceContext ctx(node, std::move(in));
    infer_node(schema, ctx);
    return ctx;
  }

  // True when every present input is a known constant, so the node can run now.
  bool can_fold(const Node& node, const OpSchema& schema, const InferenceContext& ctx) const {
    if (!schema.deterministic) return false;
    int64_t elements = 0;
    for (int i = 0; i < node.num_inputs(); ++i)
      if (ctx.has_input(i) && !ctx.input_value(i)) return false;
    for (int o = 0; o < ctx.num_outputs(); ++o) {
      if (!ctx.has_output(o)) continue;
      auto n = ctx.output(o).shape.numel();
      if (!n) return false;
      elements += *n;
    }
    return elements <= static_cast<int64_t>(options_.fold_max_elements);
  }

  void set_output_dtypes(const Node& node, const InferenceContext& ctx) {
    for (int o = 0; o < node.num_outputs(); ++o)
      if (Value* v = node.output(o)) v->dtype = ctx.output(o).dtype;
  }

  void add_constant_output(const Value* v, Tensor data) {
    plan_->folded.push_back(std::move(data));
    const Tensor& stored = plan_->folded.back();
    int s = add_slot(v, SlotKind::kConstant);
    plan_->slots[static_cast<size_t>(s)].tensor = stored;
    known_[v] = {stored.dtype(), Shape::of(stored.dims()), &stored};
  }

  // The bytes of `out` at the bounds of its run-time dims, or 0 when one has no bound.
  size_t bound_bytes(const InferenceContext::Output& out) const {
    if (!out.shape.rank_known) return 0;
    size_t bytes = dtype_size(out.dtype);
    for (const Dim& d : out.shape.dims) {
      if (d.is_static()) {
        bytes *= static_cast<size_t>(d.value);
        continue;
      }
      auto bound = d.symbol.empty() ? options_.dim_bounds.end() : options_.dim_bounds.find(d.symbol);
      if (bound == options_.dim_bounds.end()) return 0;
      bytes *= static_cast<size_t>(bound->second);
    }
    return bytes;
  }

  void plan_node(const Node& node) {
    const OpSchema& schema = OpRegistry::global().require(node);
    InferenceContext ctx = infer(node, schema);
    set_output_dtypes(node, ctx);

    bool values_known = node.num_outputs() > 0;
    for (int o = 0; o < node.num_outputs(); ++o)
      if (node.output(o) && !ctx.output(o).value.defined()) values_known = false;
    if (values_known) {  // Shape, Size: the value follows from static shapes
      for (int o = 0; o < node.num_outputs(); ++o)
        if (const Value* v = node.output(o)) add_constant_output(v, ctx.output(o).value);
      plan_->stats.num_folded++;
      return;
    }
    if (can_fold(node, schema, ctx)) {
      fold(node, ctx);
      return;
    }

    PlanStep step;
    step.node = &node;
    step.schema = &schema;
    for (int i = 0; i < node.num_inputs(); ++i)
      step.inputs.push_back(node.input(i) ? slot_of_.at(node.input(i)) : -1);
    const int source = view_source(node, schema, ctx);
    const bool view = source >= 0 && make_view(node, ctx, source, step.inputs[static_cast<size_t>(source)]);
    step.kernel = view ? point_view_at_input(source, ctx.output(0).shape.concrete()) : table_.create(node);
    for (int o = 0; o < node.num_outputs(); ++o) {
      const Value* v = node.output(o);
      if (!v) {
        step.outputs.push_back(-1);
        continue;
      }
      const Shape& shape = ctx.output(o).shape;
      bool is_output = is_graph_output(graph_, v) && (!is_consumed(v) || is_kept(v)) &&
                       !(options_.arena_outputs.count(v->name) && shape.is_static());
      SlotKind kind = view            ? SlotKind::kView
                      : is_output          ? SlotKind::kOutput
                      : shape.is_static() ? SlotKind::kArena
                                          : SlotKind::kDynamic;
      if (!shape.is_static()) step.needs_runtime_inference = true;
      int s = add_slot(v, kind);
      if (view) {
        plan_->slots[static_cast<size_t>(s)].view_of = step.inputs[static_cast<size_t>(source)];
        plan_->stats.num_views++;
      }
      if (shape.is_static()) plan_->slots[static_cast<size_t>(s)].tensor =
          Tensor::view(ctx.output(o).dtype, shape.concrete(), nullptr);
      else plan_->stats.num_dynamic++;
      if (kind == SlotKind::kDynamic) {
        Slot& slot = plan_->slots[static_cast<size_t>(s)];
        slot.bound_bytes = bound_bytes(ctx.output(o));
        if (shape.rank_known)
          for (const Dim& d : shape.dims) slot.dim_symbols.push_back(d.is_static() ? "" : d.symbol);
        TRAINRT_LOG(kVerbose) << "graph '" << graph_.name << "': " << v->name << " " << to_string(shape)
                              << " is sized at run time" << (slot.bound_bytes ? " (in a bounded arena block)" : "");
      }
      known_[v] = {ctx.output(o).dtype, shape, nullptr};
      step.outputs.push_back(s);
    }
    step.input_ptrs.resize(step.inputs.size());
    step.output_ptrs.resize(step.outputs.size());
    plan_->steps.push_back(std::move(step));
  }

  // A view op's output becomes a view of input 0 when its dims are static. A view that is a graph
  // output is handed to the caller, so the bytes it shows must be fresh storage of this run: an
  // arena intermediate it views becomes such storage (kOutput) too, and the caller gets both
  // sharing it; a view of the caller's or the plan's memory (inputs, parameters, constants) or of a
  // value sized at run time stays a copy.
  // The input whose bytes the node's output shows unchanged, or -1: input 0 of a view op (or of one
  // that is a view when its dims stay); the data of a Gather, or the dY of a GatherGrad, by a row
  // selection that names every row (PlanOptions::row_selections).
  int view_source(const Node& node, const OpSchema& schema, const InferenceContext& ctx) const {
    if (node.num_outputs() != 1 || !node.output(0) || node.num_inputs() == 0) return -1;
    const auto same_dims = [&](int input) {
      return ctx.has_input(input) && ctx.input_shape(input).is_static() && ctx.output(0).shape.is_static() &&
             ctx.input_shape(input).concrete() == ctx.output(0).shape.concrete();
    };
    if (schema.is_view || (schema.view_when_same_dims && same_dims(0))) return 0;
    const Value* rows = node.input(1);
    if (!rows || rows->producer || !options_.row_selections.count(rows->name) || node.attr_int("axis", 0) != 0)
      return -1;
    if (node.domain() == kOnnxDomain && node.op_type() == "Gather" && same_dims(0)) return 0;
    const bool plain_scatter = node.domain() == kTrainrtDomain && node.op_type() == "GatherGrad" &&
                               !node.has_attr("padding_idx") && !ctx.has_input(3);
    return plain_scatter && same_dims(2) ? 2 : -1;
  }

  bool make_view(const Node& node, const InferenceContext& ctx, int source, int input_slot) {
    if (input_slot < 0) return false;
    if (!ctx.output(0).shape.is_static() || ctx.output(0).dtype != ctx.input_dtype(source)) return false;
    if (!is_graph_output(graph_, node.output(0)) || (is_consumed(node.output(0)) && !is_kept(node.output(0))) ||
        options_.arena_outputs.count(node.output(0)->name))
      return true;  // handed over as the bytes it views: fresh storage, arena bytes, or a copy
    Slot& viewed = plan_->slots[static_cast<size_t>(viewed_slot(*plan_, input_slot))];
    if (viewed.kind == SlotKind::kArena) viewed.kind = SlotKind::kOutput;
    return viewed.kind == SlotKind::kOutput;
  }

  void fold(const Node& node, const InferenceContext& ctx) {
    std::vector<const Tensor*> in;
    for (int i = 0; i < node.num_inputs(); ++i) in.push_back(ctx.input_value(i));
    std::vector<Tensor> out(static_cast<size_t>(node.num_outputs()));
    std::vector<Tensor*> out_ptrs;
    for (int o = 0; o < node.num_outputs(); ++o) {
      if (node.output(o)) {
        out[static_cast<size_t>(o)] = Tensor::empty(ctx.output(o).dtype, ctx.output(o).shape.concrete());
        out_ptrs.push_back(&out[static_cast<size_t>(o)]);
      } else {
        out_ptrs.push_back(nullptr);
      }
    }
    KernelFn kernel = table_.create(node);
    KernelContext kctx;
    kctx.inputs = in;
    kctx.outputs = out_ptrs;
    kernel(kctx);
    for (int o = 0; o < node.num_outputs(); ++o)
      if (const Value* v = node.output(o)) add_constant_output(v, std::move(out[static_cast<size_t>(o)]));
    plan_->stats.num_folded++;
  }

  bool is_consumed(const Value* v) const {
    for (const ConsumedOutput& c : options_.consumed_outputs)
      if (c.output == v->name) return true;
    return false;
  }

  // A consumed output the consumer keeps: fresh storage, as a returned output (ConsumedOutput::keep).
  bool is_kept(const Value* v) const {
    for (const ConsumedOutput& c : options_.consumed_outputs)
      if (c.output == v->name) return c.keep;
    return false;
  }

  // Each consumed output names a graph output, each hold a graph input that is not donated.
  void check_consumed_outputs() const {
    for (const ConsumedOutput& c : options_.consumed_outputs) {
      const auto& outputs = graph_.outputs();
      if (std::none_of(outputs.begin(), outputs.end(), [&](const Value* v) { return v->name == c.output; }))
        throw InvalidModel(fmt("graph '", graph_.name, "': consumed output '", c.output, "' is not a graph output"));
      if (c.hold.empty()) continue;
      const auto& inputs = graph_.inputs();
      if (std::none_of(inputs.begin(), inputs.end(), [&](const Value* v) { return v->name == c.hold; }))
        throw InvalidModel(fmt("graph '", graph_.name, "': hold input '", c.hold, "' of consumed output '",
                               c.output, "' is not a graph input"));
      if (options_.donated_inputs.count(c.hold))
        throw InvalidModel(fmt("graph '", graph_.name, "': hold input '", c.hold, "' of consumed output '",
                               c.output, "' is donated: the run may write over the bytes its consumer updates"));
    }
  }

  void bind_graph_outputs() {
    for (const Value* v : graph_.outputs()) {
      auto it = slot_of_.find(v);
      if (it == slot_of_.end())
        throw InvalidModel(fmt("graph output '", v->name, "' is not produced by any node"));
      plan_->output_slots.push_back(it->second);
      plan_->output_consumed.push_back(is_consumed(v));
      plan_->output_kept.push_back(is_kept(v));
    }
  }

  // When each consumed output is handed over: after the last step that touches its memory (the
  // producer, later readers, views of it) and the last step that reads its hold input's memory
  // (directly or through a view: the consumer may write it). A returned output showing a hold
  // input's bytes is copied after the run, once the consumer has written them: refused.
  void place_consume_points() {
    std::unordered_map<int, int> last_touch;  // memory slot (the end of a chain of views) -> step
    for (size_t s = 0; s < plan_->steps.size(); ++s) {
      const PlanStep& step = plan_->steps[s];
      for (int slot : step.inputs) if (slot >= 0) last_touch[viewed_slot(*plan_, slot)] = static_cast<int>(s);
      for (int slot : step.outputs) if (slot >= 0) last_touch[viewed_slot(*plan_, slot)] = static_cast<int>(s);
    }
    auto touched_until = [&](int slot) {
      auto it = last_touch.find(viewed_slot(*plan_, slot));
      return it == last_touch.end() ? -1 : it->second;
    };
    const auto& outputs = graph_.outputs();
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!plan_->output_consumed[o]) continue;
      const int slot = plan_->output_slots[o];
      int after = touched_until(slot);
      for (const ConsumedOutput& c : options_.consumed_outputs) {
        if (c.output != outputs[o]->name || c.hold.empty()) continue;
        const int hold = slot_of_.at(graph_.find_value(c.hold));
        after = std::max(after, touched_until(hold));
        for (size_t r = 0; r < outputs.size(); ++r)
          if (!plan_->output_consumed[r] && viewed_slot(*plan_, plan_->output_slots[r]) == hold)
            throw InvalidModel(fmt("graph '", graph_.name, "': output '", outputs[r]->name, "' shows the bytes of '",
                                   c.hold, "', which the consumer of '", c.output, "' writes during the run"));
      }
      plan_->consume_points.push_back({after, o, slot, block_rows(o, slot, after, last_touch)});
    }
    std::stable_sort(plan_->consume_points.begin(), plan_->consume_points.end(),
                     [](const ConsumePoint& a, const ConsumePoint& b) { return a.after_step < b.after_step; });
  }

  // Rows per block when graph output `o` in `slot`, consumed after step `after`, is made and
  // consumed in row blocks (PlanOptions::consume_row_block_bytes); 0: consumed whole. `last_touch`:
  // the last step touching each memory slot. The producer must be step `after` itself, and must
  // not read the hold input (the consumer writes it after the first block, before the last) nor
  // write in place (one block's bytes cannot hold the input it overwrites).
  int64_t block_rows(size_t o, int slot, int after, const std::unordered_map<int, int>& last_touch) const {
    const std::string& name = graph_.outputs()[o]->name;
    auto wanted = options_.consume_row_block_bytes.find(name);
    if (wanted == options_.consume_row_block_bytes.end() || wanted->second == 0 || after < 0) return 0;
    const PlanStep& step = plan_->steps[static_cast<size_t>(after)];
    const Slot& home = plan_->slots[static_cast<size_t>(slot)];
    if (home.kind != SlotKind::kArena || step.outputs.empty() || step.outputs[0] != slot || !step.schema->inplace.empty() ||
        step.needs_runtime_inference || !table_.computes_row_ranges(*step.node) || home.tensor.rank() < 1)
      return 0;
    for (const ConsumedOutput& c : options_.consumed_outputs) {
      if (c.output != name || c.hold.empty()) continue;
      auto hold = last_touch.find(viewed_slot(*plan_, slot_of_.at(graph_.find_value(c.hold))));
      if (hold != last_touch.end() && hold->second >= after) return 0;
    }
    const int64_t rows = home.tensor.dim(0);
    const size_t row_bytes = rows > 0 ? home.tensor.nbytes() / static_cast<size_t>(rows) : 0;
    if (row_bytes == 0) return 0;
    // Every block starts kTensorAlignment-aligned, as the whole output does: a vectorized consumer
    // then runs the same code over each element (no scalar head), and gets the same bits.
    const int64_t align = static_cast<int64_t>(kTensorAlignment / std::gcd(row_bytes, kTensorAlignment));
    const int64_t per_block = std::max<int64_t>(1, static_cast<int64_t>(wanted->second / row_bytes) / align) * align;
    return per_block < rows ? per_block : 0;
  }


  Graph& graph_;
  const KernelTable& table_;
  const PlanOptions& options_;
  std::unique_ptr<ExecutionPlan> plan_;
  std::unordered_map<const Value*, int> slot_of_;
  std::unordered_map<const Value*, Known> known_;
};

}  // namespace

std::unique_ptr<ExecutionPlan> build_execution_plan(Graph& graph, const std::vector<Tensor>& inputs,
                                                    const KernelTable& table, const PlanOptions& options) {
  return PlanBuilder(graph, table, options).build(inputs);
}

}  // namespace trainrt
