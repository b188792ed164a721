#include "trainrt/runtime/control_flow_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "trainrt/ir/graph_clone.h"
#include "trainrt/kernels/codegen/fused_elementwise_kernel.h"
#include "trainrt/kernels/cpu/host_kernels.h"
#include "trainrt/ops/control_flow_args.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

// One body and the Session that runs it, made at the first run (its input dtypes are then known).
class BodyRunner {
 public:
  BodyRunner(const Graph& body, std::string where) : body_(clone_graph(body)), where_(std::move(where)) {}

  std::vector<Tensor> run(const std::vector<Tensor>& inputs, ThreadPool* threads) {
    return with_error_context(where_, [&] {
      if (!session_) {
        // The body's declared input dims are not checked: a loop-carried value may change dims.
        for (size_t i = 0; i < inputs.size() && i < body_->inputs().size(); ++i) {
          body_->mutable_inputs()[i]->dtype = inputs[i].dtype();
          body_->mutable_inputs()[i]->shape = Shape::unknown_rank();
        }
        SessionOptions options;
        options.threads = threads;
        session_ = std::make_unique<Session>(body_, options);
      }
      return session_->run(inputs);
    });
  }

  const std::string& where() const { return where_; }

 private:
  std::shared_ptr<Graph> body_;
  std::string where_;
  std::unique_ptr<Session> session_;
};

// What a control-flow kernel keeps of its node: text for errors and the planned output types (for
// scan outputs of zero iterations, which no slice describes).
struct NodeFacts {
  std::string where;
  std::vector<DType> output_dtypes;
  std::vector<Shape> output_shapes;
  std::shared_ptr<const Graph> body;  // Loop's and Scan's (If's: then_branch)
  explicit NodeFacts(const Node& node, const char* body_attr)
      : where(node.describe()), body(node.attr(body_attr)->g) {
    body_of(node, body_attr);  // throws naming the node when there is none
    for (const Value* v : node.outputs()) {
      output_dtypes.push_back(v ? v->dtype : DType::kUndefined);
      output_shapes.push_back(v ? v->shape : Shape::unknown_rank());
    }
  }
};

bool scalar_bool(const Tensor& t, const std::string& where, const char* what) {
  if (t.dtype() != DType::kBool || t.numel() != 1)
    throw ShapeError(fmt(where, ": ", what, " is ", describe(t), ", expected one bool"));
  return t.data<bool>()[0];
}

// Writes `value` as output o: into the storage the plan gave it, or as the output itself where the
// plan left it to the kernel (the body's fresh storage, or a copy of memory the node does not own).
void set_output(KernelContext& ctx, size_t o, const Tensor& value, bool owned, const std::string& where) {
  const int k = static_cast<int>(o);
  if (!ctx.has_out(k)) return;
  Tensor& out = ctx.out(k);
  if (!out.defined()) {
    out = owned ? value : value.clone();
    return;
  }
  if (out.dtype() != value.dtype() || out.dims() != value.dims())
    throw ShapeError(fmt(where, ": output ", o, " is ", describe(value), ", planned as ", describe(out)));
  std::memcpy(out.raw(), value.raw(), out.nbytes());
}

// Bytes of x before axis (outer), of the axis, and after it (inner), for row-major copies.
struct AxisSplit {
  int64_t outer = 1, length = 1;
  size_t inner_bytes = 0;
};
AxisSplit split_at(DType dtype, const std::vector<int64_t>& dims, int64_t axis) {
  AxisSplit s;
  s.inner_bytes = dtype_size(dtype);
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    const int64_t n = dims[static_cast<size_t>(d)];
    if (d < axis) s.outer *= n;
    else if (d == axis) s.length = n;
    else s.inner_bytes *= static_cast<size_t>(n);
  }
  return s;
}

// x's index `index` along `axis`, that axis dropped: a view when the axis is outermost, else a copy.
Tensor take(const Tensor& x, int64_t axis, int64_t index) {
  std::vector<int64_t> dims = x.dims();
  dims.erase(dims.begin() + axis);
  const AxisSplit s = split_at(x.dtype(), x.dims(), axis);
  const auto* src = static_cast<const char*>(x.raw());
  if (s.outer == 1) return Tensor::view(x.dtype(), dims, const_cast<char*>(src) + index * s.inner_bytes);
  Tensor out = Tensor::empty(x.dtype(), dims);
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < s.outer; ++o)
    std::memcpy(dst + o * s.inner_bytes, src + (o * s.length + index) * s.inner_bytes, s.inner_bytes);
  return out;
}

// The slices stacked along a new axis `axis`; `empty_dims`: the result's dims when there are none.
Tensor stack(const std::vector<Tensor>& slices, int64_t axis, std::vector<int64_t> empty_dims, DType empty_dtype,
             const std::string& where) {
  if (slices.empty()) return Tensor::empty(empty_dtype, std::move(empty_dims));
  const Tensor& first = slices[0];
  for (size_t j = 1; j < slices.size(); ++j)
    if (slices[j].dtype() != first.dtype() || slices[j].dims() != first.dims())
      throw ShapeError(fmt(where, ": scan output slices differ: iteration ", j, " gives ", describe(slices[j]),
                           ", iteration 0 ", describe(first)));
  std::vector<int64_t> dims = first.dims();
  dims.insert(dims.begin() + axis, static_cast<int64_t>(slices.size()));
  Tensor out = Tensor::empty(first.dtype(), dims);
  const AxisSplit s = split_at(first.dtype(), dims, axis);
  auto* dst = static_cast<char*>(out.raw());
  for (size_t j = 0; j < slices.size(); ++j) {
    const auto* src = static_cast<const char*>(slices[j].raw());
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(dst + (o * s.length + static_cast<int64_t>(j)) * s.inner_bytes, src + o * s.inner_bytes, s.inner_bytes);
  }
  return out;
}

// The dims of a scan output with no slices: the planned dims, 0 where not known.
std::vector<int64_t> empty_dims(const Shape& planned, int64_t axis) {
  if (!planned.rank_known) return {0};
  std::vector<int64_t> dims;
  for (const Dim& d : planned.dims) dims.push_back(d.is_static() ? d.value : 0);
  dims[static_cast<size_t>(axis)] = 0;
  return dims;
}

// The shapes of the body's outputs for inputs of these dtypes and dims (shape inference on a copy):
// what a scan output of zero iterations stacks, as no slice was made to say it.
std::vector<Shape> body_output_shapes(const Graph& body, const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> copy = clone_graph(body);
  for (size_t i = 0; i < inputs.size() && i < copy->inputs().size(); ++i) {
    copy->mutable_inputs()[i]->dtype = inputs[i].dtype();
    copy->mutable_inputs()[i]->shape = Shape::of(inputs[i].dims());
  }
  infer_graph_shapes(*copy);
  std::vector<Shape> out;
  for (const Value* v : copy->outputs()) out.push_back(v->shape);
  return out;
}

// `planned` with the slice's dims where inference knows them: the stacked dims, `axis` inserted.
Shape stacked_shape(const Shape& slice, int64_t axis, const Shape& planned) {
  if (!slice.rank_known || !slice.is_static()) return planned;
  std::vector<Dim> dims = slice.dims;
  dims.insert(dims.begin() + normalize_axis(axis, slice.rank() + 1), Dim(0));
  return Shape(std::move(dims));
}

std::vector<Tensor> inputs_from(const KernelContext& ctx, size_t first, size_t count) {
  std::vector<Tensor> out;
  for (size_t i = first; i < first + count; ++i) out.push_back(ctx.in(static_cast<int>(i)));
  return out;
}

KernelFn make_if(const Node& node) {
  auto facts = std::make_shared<NodeFacts>(node, "then_branch");
  auto then_body = std::make_shared<BodyRunner>(body_of(node, "then_branch"), node.describe() + ": then_branch");
  auto else_body = std::make_shared<BodyRunner>(body_of(node, "else_branch"), node.describe() + ": else_branch");
  return [facts, then_body, else_body](KernelContext& ctx) {
    BodyRunner& body = scalar_bool(ctx.in(0), facts->where, "the condition") ? *then_body : *else_body;
    const std::vector<Tensor> out = body.run(inputs_from(ctx, 1, ctx.inputs.size() - 1), ctx.pool);
    if (out.size() != ctx.outputs.size())
      throw ShapeError(fmt(body.where(), ": gives ", out.size(), " outputs, the node has ", ctx.outputs.size()));
    for (size_t o = 0; o < out.size(); ++o) set_output(ctx, o, out[o], true, facts->where);
  };
}

KernelFn make_loop(const Node& node) {
  auto facts = std::make_shared<NodeFacts>(node, "body");
  const LoopSignature s = loop_signature(node);
  auto body = std::make_shared<BodyRunner>(body_of(node, "body"), node.describe() + ": body");
  return [facts, s, body](KernelContext& ctx) {
    int64_t trips = std::numeric_limits<int64_t>::max();
    if (ctx.has_in(0)) {
      if (ctx.in(0).numel() != 1) throw ShapeError(fmt(facts->where, ": M is ", describe(ctx.in(0)), ", expected one i64"));
      trips = ctx.in(0).data<int64_t>()[0];
    }
    bool go = ctx.has_in(1) ? scalar_bool(ctx.in(1), facts->where, "the condition") : true;
    std::vector<Tensor> carried = inputs_from(ctx, 2, s.carried);
    bool carried_owned = false;  // still the node's inputs: copied if they become outputs
    std::vector<std::vector<Tensor>> scans(s.scan_outputs);
    std::vector<Tensor> in(2 + s.carried + s.implicit);
    for (size_t i = 0; i < s.implicit; ++i) in[2 + s.carried + i] = ctx.in(static_cast<int>(2 + s.carried + i));
    for (int64_t i = 0; i < trips && go; ++i) {
      in[0] = Tensor::scalar<int64_t>(i);
      in[1] = Tensor::scalar<bool>(go);
      for (size_t v = 0; v < s.carried; ++v) in[2 + v] = carried[v];
      std::vector<Tensor> out = body->run(in, ctx.pool);
      go = scalar_bool(out[0], body->where(), "output 0 (the condition)");
      for (size_t v = 0; v < s.carried; ++v) carried[v] = std::move(out[1 + v]);
      carried_owned = true;
      for (size_t k = 0; k < s.scan_outputs; ++k) scans[k].push_back(std::move(out[1 + s.carried + k]));
    }
    for (size_t v = 0; v < s.carried; ++v) set_output(ctx, v, carried[v], carried_owned, facts->where);
    std::vector<Shape> slices;  // zero iterations: what the body would have given
    if (s.scan_outputs && (trips <= 0 || scans[0].empty())) {
      in[0] = Tensor::scalar<int64_t>(0);
      in[1] = Tensor::scalar<bool>(true);
      for (size_t v = 0; v < s.carried; ++v) in[2 + v] = carried[v];
      slices = with_error_context(body->where(), [&] { return body_output_shapes(*facts->body, in); });
    }
    for (size_t k = 0; k < s.scan_outputs; ++k) {
      const size_t o = s.carried + k;
      const Shape planned = slices.empty() ? facts->output_shapes[o]
                                           : stacked_shape(slices[1 + s.carried + k], 0, facts->output_shapes[o]);
      set_output(ctx, o, stack(scans[k], 0, empty_dims(planned, 0), facts->output_dtypes[o], facts->where), true,
                 facts->where);
    }
  };
}

// Scans one row (the whole input for Scan-9+): states (N), scan inputs (M), implicit values (I).
// Returns the final states (N) then the stacked scan outputs (K).
std::vector<Tensor> scan_row(BodyRunner& body, const ScanSignature& s, const NodeFacts& facts,
                             std::vector<Tensor> states, const std::vector<Tensor>& scan_inputs,
                             const std::vector<Tensor>& implicit, ThreadPool* threads, int64_t output_offset) {
  std::vector<int64_t> axes;
  int64_t length = -1;
  for (size_t m = 0; m < s.scan_inputs; ++m) {
    const Tensor& x = scan_inputs[m];
    if (x.rank() == 0) throw ShapeError(fmt(facts.where, ": scan input ", m, " is a scalar, it has no axis to scan"));
    const int64_t axis = normalize_axis(s.input_axes[m], x.rank());
    axes.push_back(axis);
    if (length >= 0 && x.dim(axis) != length)
      throw ShapeError(fmt(facts.where, ": scan input ", m, " has ", x.dim(axis), " steps along axis ", axis,
                           ", scan input 0 has ", length));
    length = x.dim(axis);
  }
  bool states_owned = false;
  std::vector<std::vector<Tensor>> scans(s.scan_outputs);
  std::vector<Tensor> in(s.states + s.scan_inputs + s.implicit);
  for (size_t i = 0; i < s.implicit; ++i) in[s.states + s.scan_inputs + i] = implicit[i];
  for (int64_t t = 0; t < length; ++t) {
    for (size_t i = 0; i < s.states; ++i) in[i] = states[i];
    for (size_t m = 0; m < s.scan_inputs; ++m)
      in[s.states + m] = take(scan_inputs[m], axes[m], s.input_reverse[m] ? length - 1 - t : t);
    std::vector<Tensor> out = body.run(in, threads);
    for (size_t i = 0; i < s.states; ++i) states[i] = std::move(out[i]);
    states_owned = true;
    for (size_t k = 0; k < s.scan_outputs; ++k) scans[k].push_back(std::move(out[s.states + k]));
  }
  std::vector<Shape> slices;  // zero steps: what the body would have given (dims only)
  if (length == 0 && s.scan_outputs) {
    for (size_t i = 0; i < s.states; ++i) in[i] = states[i];
    for (size_t m = 0; m < s.scan_inputs; ++m) {
      std::vector<int64_t> dims = scan_inputs[m].dims();
      dims.erase(dims.begin() + axes[m]);
      in[s.states + m] = Tensor::view(scan_inputs[m].dtype(), dims, nullptr);
    }
    slices = with_error_context(body.where(), [&] { return body_output_shapes(*facts.body, in); });
  }
  std::vector<Tensor> result;
  for (Tensor& state : states) result.push_back(states_owned ? state : state.clone());
  for (size_t k = 0; k < s.scan_outputs; ++k) {
    if (s.output_reverse[k]) std::reverse(scans[k].begin(), scans[k].end());
    const Shape& planned = facts.output_shapes[s.states + k];
    const Shape& slice = slices.empty() ? Shape::unknown_rank() : slices[s.states + k];
    const int64_t rank = !scans[k].empty() ? scans[k][0].rank() + 1
                         : slice.rank_known ? slice.rank() + 1
                         : planned.rank_known ? planned.rank() - output_offset : 1;
    const int64_t axis = normalize_axis(s.output_axes[k], rank);
    std::vector<int64_t> none;
    if (slice.rank_known && slice.is_static()) {
      none = empty_dims(stacked_shape(slice, axis, planned), axis);
    } else {
      none = empty_dims(planned, axis + output_offset);
      if (output_offset && none.size() > 1) none.erase(none.begin());
    }
    result.push_back(stack(scans[k], axis, none, facts.output_dtypes[s.states + k], body.where()));
  }
  return result;
}

KernelFn make_scan(const Node& node) {
  auto facts = std::make_shared<NodeFacts>(node, "body");
  const ScanSignature s = scan_signature(node);
  auto body = std::make_shared<BodyRunner>(body_of(node, "body"), node.describe() + ": body");
  return [facts, s, body](KernelContext& ctx) {
    if (s.batched && ctx.has_in(0))
      throw UnsupportedOp(fmt(facts->where, ": sequence_lens is not supported (Scan-8 with sequences of different lengths)"));
    const std::vector<Tensor> states = inputs_from(ctx, s.first_state, s.states);
    const std::vector<Tensor> scan_inputs = inputs_from(ctx, s.first_state + s.states, s.scan_inputs);
    const std::vector<Tensor> implicit = inputs_from(ctx, s.first_state + s.states + s.scan_inputs, s.implicit);
    if (!s.batched) {
      const std::vector<Tensor> out = scan_row(*body, s, *facts, states, scan_inputs, implicit, ctx.pool, 0);
      for (size_t o = 0; o < out.size(); ++o) set_output(ctx, o, out[o], true, facts->where);
      return;
    }
    // Scan-8: every state and scan input has the batch on axis 0; each row is scanned on its own.
    const int64_t batch = states.empty() ? scan_inputs[0].dim(0) : states[0].dim(0);
    std::vector<std::vector<Tensor>> rows(s.states + s.scan_outputs);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> row_states, row_inputs;
      for (const Tensor& x : states) row_states.push_back(take(x, 0, b));
      for (const Tensor& x : scan_inputs) row_inputs.push_back(take(x, 0, b));
      std::vector<Tensor> out = scan_row(*body, s, *facts, row_states, row_inputs, implicit, ctx.pool, 1);
      for (size_t o = 0; o < out.size(); ++o) rows[o].push_back(std::move(out[o]));
    }
    for (size_t o = 0; o < rows.size(); ++o)
      set_output(ctx, o, stack(rows[o], 0, empty_dims(facts->output_shapes[o], 0), facts->output_dtypes[o], facts->where),
                 true, facts->where);
  };
}

}  // namespace

const KernelTable& runtime_kernel_table() {
  // Added to the CPU table itself, as the codegen and binding layers add theirs: one table.
  static const bool added = [] {
    add_host_kernel("", "If", DType::kUndefined, make_if);
    add_host_kernel("", "Loop", DType::kUndefined, make_loop);
    add_host_kernel("", "Scan", DType::kUndefined, make_scan);
    return true;
  }();
  (void)added;
  return engine_kernel_table();
}

}  // namespace trainrt
