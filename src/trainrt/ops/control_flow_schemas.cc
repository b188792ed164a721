// ONNX If, Loop and Scan (ops/control_flow_args.h for how a node maps onto its body).
//
// Output types come from shape inference of the body, on a copy given the node's input types (and
// values, where known): If takes the branch its condition picks when the condition is known, else
// both branches' types merged (a dim the branches disagree on is unknown). Loop-carried values and
// Scan states keep the dims the body keeps; Loop's scan outputs get an unknown leading dim (the
// iterations run), Scan's the sequence length. Dims inference cannot give are sized when the node
// runs: the kernel runs the body and allocates them (OpSchema::sizes_outputs_when_run).
#include <memory>

#include "trainrt/ir/control_flow.h"
#include "trainrt/ir/graph_clone.h"
#include "trainrt/ops/control_flow_args.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

struct Typed {
  DType dtype = DType::kUndefined;
  Shape shape = Shape::unknown_rank();
  const Tensor* value = nullptr;
};

// The body's output types when it is given inputs of these types.
std::vector<Typed> infer_body(const InferenceContext& ctx, const char* attr, const std::vector<Typed>& inputs) {
  const Graph& body = body_of(ctx.node(), attr);
  return with_error_context(fmt(ctx.node().describe(), ": body '", attr, "'"), [&] {
    std::unique_ptr<Graph> copy = clone_graph(body);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Value* v = copy->mutable_inputs()[i];
      v->dtype = inputs[i].dtype;
      v->shape = inputs[i].shape;
      if (inputs[i].value) v->data = *inputs[i].value;
    }
    infer_graph_shapes(*copy);
    std::vector<Typed> out;
    for (const Value* v : copy->outputs()) out.push_back({v->dtype, v->shape});
    return out;
  });
}

Typed input_type(const InferenceContext& ctx, size_t i) {
  const int k = static_cast<int>(i);
  return {ctx.input_dtype(k), ctx.input_shape(k), ctx.input_value(k)};
}

// A shape both may have: dims they agree on, unknown elsewhere.
Shape merge(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank()) return Shape::unknown_rank();
  std::vector<Dim> dims;
  for (size_t d = 0; d < a.dims.size(); ++d) dims.push_back(a.dims[d] == b.dims[d] ? a.dims[d] : Dim());
  return Shape(std::move(dims));
}

void expect_same_dtype(const InferenceContext& ctx, const char* what, size_t i, DType a, DType b) {
  if (a != b)
    ctx.fail(fmt(what, " ", i, " is ", dtype_name(a), " in one place and ", dtype_name(b), " in another"));
}

std::vector<Typed> implicit_types(const InferenceContext& ctx, size_t first) {
  std::vector<Typed> out;
  for (size_t i = first; i < static_cast<size_t>(ctx.num_inputs()); ++i) out.push_back(input_type(ctx, i));
  return out;
}

void infer_if(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kBool});
  const std::vector<Typed> implicit = implicit_types(ctx, 1);
  const size_t implicit_count = implicit_inputs(ctx.node());
  if (implicit.size() != implicit_count)
    ctx.fail(fmt("takes a condition and ", implicit_count, " enclosing values, got ", ctx.num_inputs(), " inputs"));
  const Tensor* cond = ctx.input_value(0);
  std::vector<Typed> then_types, else_types;
  if (!cond || cond->numel() != 1 || cond->data<bool>()[0]) then_types = infer_body(ctx, "then_branch", implicit);
  if (!cond || cond->numel() != 1 || !cond->data<bool>()[0]) else_types = infer_body(ctx, "else_branch", implicit);
  const std::vector<Typed>& any = then_types.empty() ? else_types : then_types;
  if (static_cast<int>(any.size()) != ctx.num_outputs() || (!then_types.empty() && !else_types.empty() && then_types.size() != else_types.size()))
    ctx.fail(fmt("has ", ctx.num_outputs(), " outputs; its branches give ", then_types.size(), " and ", else_types.size()));
  for (size_t o = 0; o < any.size(); ++o) {
    Shape shape = any[o].shape;
    if (!then_types.empty() && !else_types.empty()) {
      expect_same_dtype(ctx, "output", o, then_types[o].dtype, else_types[o].dtype);
      shape = merge(then_types[o].shape, else_types[o].shape);
    }
    ctx.set_output(static_cast<int>(o), any[o].dtype, std::move(shape));
  }
}

void infer_loop(InferenceContext& ctx) {
  const LoopSignature s = loop_signature(ctx.node());
  if (ctx.has_input(0)) ctx.expect_dtype(0, {DType::kI64});
  if (ctx.has_input(1)) ctx.expect_dtype(1, {DType::kBool});
  const Shape scalar(std::vector<Dim>{});
  std::vector<Typed> in = {{DType::kI64, scalar}, {DType::kBool, scalar}};
  for (size_t v = 0; v < s.carried; ++v) in.push_back({ctx.input_dtype(static_cast<int>(2 + v)), ctx.input_shape(static_cast<int>(2 + v))});
  for (const Typed& t : implicit_types(ctx, 2 + s.carried)) in.push_back(t);
  const std::vector<Typed> out = infer_body(ctx, "body", in);
  for (size_t v = 0; v < s.carried; ++v) {
    expect_same_dtype(ctx, "loop-carried value", v, in[2 + v].dtype, out[1 + v].dtype);
    ctx.set_output(static_cast<int>(v), out[1 + v].dtype, merge(in[2 + v].shape, out[1 + v].shape));
  }
  for (size_t k = 0; k < s.scan_outputs; ++k) {
    const Typed& slice = out[1 + s.carried + k];
    Shape stacked = Shape::unknown_rank();
    if (slice.shape.rank_known) {
      std::vector<Dim> dims = {Dim()};
      dims.insert(dims.end(), slice.shape.dims.begin(), slice.shape.dims.end());
      stacked = Shape(std::move(dims));
    }
    ctx.set_output(static_cast<int>(s.carried + k), slice.dtype, std::move(stacked));
  }
}

// Shape `s` without axis `axis` (or with `dim` inserted there); unknown rank stays unknown.
Shape without_axis(const Shape& s, int64_t axis) {
  if (!s.rank_known) return s;
  std::vector<Dim> dims = s.dims;
  dims.erase(dims.begin() + normalize_axis(axis, s.rank()));
  return Shape(std::move(dims));
}
Shape with_axis(const Shape& s, int64_t axis, const Dim& dim) {
  if (!s.rank_known) return s;
  std::vector<Dim> dims = s.dims;
  dims.insert(dims.begin() + normalize_axis(axis, s.rank() + 1), dim);
  return Shape(std::move(dims));
}

void infer_scan(InferenceContext& ctx) {
  const ScanSignature s = scan_signature(ctx.node());
  if (s.batched && ctx.has_input(0)) ctx.fail("sequence_lens is not supported (Scan-8 with sequences of different lengths)");
  // Scan-8 scans each batch row: the body sees the row (axis 0 dropped); outputs get it back.
  auto per_row = [&](const Shape& shape) { return s.batched ? without_axis(shape, 0) : shape; };
  std::vector<Typed> in;
  Dim batch, length;
  bool first = true;
  for (size_t i = 0; i < s.states; ++i) {
    const Typed t = input_type(ctx, s.first_state + i);
    if (s.batched && t.shape.rank_known && t.shape.rank() > 0) batch = t.shape.dims[0];
    in.push_back({t.dtype, per_row(t.shape)});
  }
  for (size_t m = 0; m < s.scan_inputs; ++m) {
    const Typed t = input_type(ctx, s.first_state + s.states + m);
    const Shape row = per_row(t.shape);
    if (row.rank_known) {
      const Dim& l = row.dims[static_cast<size_t>(normalize_axis(s.input_axes[m], row.rank()))];
      length = first ? l : (length == l ? length : Dim());
      first = false;
    }
    in.push_back({t.dtype, without_axis(row, s.input_axes[m])});
  }
  for (const Typed& t : implicit_types(ctx, s.first_state + s.states + s.scan_inputs)) in.push_back(t);
  const std::vector<Typed> out = infer_body(ctx, "body", in);
  auto batched = [&](Shape shape) { return s.batched ? with_axis(shape, 0, batch) : shape; };
  for (size_t i = 0; i < s.states; ++i) {
    expect_same_dtype(ctx, "state", i, in[i].dtype, out[i].dtype);
    ctx.set_output(static_cast<int>(i), out[i].dtype, batched(merge(in[i].shape, out[i].shape)));
  }
  for (size_t k = 0; k < s.scan_outputs; ++k) {
    const Typed& slice = out[s.states + k];
    ctx.set_output(static_cast<int>(s.states + k), slice.dtype, batched(with_axis(slice.shape, s.output_axes[k], length)));
  }
}

}  // namespace

void register_control_flow_schemas(OpRegistry& r) {
  r.add({.name = "If", .min_inputs = 1, .max_inputs = OpSchema::kVariadic, .min_outputs = 1,
         .max_outputs = OpSchema::kVariadic, .infer = infer_if, .sizes_outputs_when_run = true});
  r.add({.name = "Loop", .min_inputs = 0, .max_inputs = OpSchema::kVariadic, .min_outputs = 0,
         .max_outputs = OpSchema::kVariadic, .infer = infer_loop, .sizes_outputs_when_run = true});
  r.add({.name = "Scan", .min_inputs = 0, .max_inputs = OpSchema::kVariadic, .min_outputs = 1,
         .max_outputs = OpSchema::kVariadic, .infer = infer_scan, .sizes_outputs_when_run = true});
}

}  // namespace trainrt
