// Schemas of the ops that select or join parts of tensors: Gather, Concat, Split, Slice, and
// TrainRT's Embedding. Semantics: ONNX operator spec; Slice and Split sizes come from
// tensor_op_args.h, which the CPU kernels use too.
//   Embedding(weight, indices) -> Gather(weight, indices, axis=0), attribute padding_idx: the row
//       whose gradient is zero (torch.nn.Embedding(padding_idx=p); ONNX Gather cannot say it)
#include <algorithm>
#include <limits>

#include "trainrt/ops/tensor_op_args.h"
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

// data (d0, .., d[axis], .., dn) and indices (i0, .., ik) -> (d0, .., i0, .., ik, .., dn).
void infer_gather(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  const Shape& data = ctx.input_shape(0);
  const Shape& indices = ctx.input_shape(1);
  const DType t = ctx.input_dtype(0);
  if (!data.rank_known || !indices.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  if (data.rank() == 0) ctx.fail("input 0 is a scalar; Gather needs rank >= 1");
  const int64_t axis = ctx.node().attr_int("axis", 0);
  const size_t a = static_cast<size_t>(checked_axis(ctx, axis, data.rank(), "axis"));
  std::vector<Dim> out(data.dims.begin(), data.dims.begin() + static_cast<std::ptrdiff_t>(a));
  out.insert(out.end(), indices.dims.begin(), indices.dims.end());
  out.insert(out.end(), data.dims.begin() + static_cast<std::ptrdiff_t>(a) + 1, data.dims.end());
  ctx.set_output(0, t, Shape(std::move(out)));
}

// Gather on axis 0, plus padding_idx in [0, rows) when the row count is known.
void infer_embedding(InferenceContext& ctx) {
  const Node& node = ctx.node();
  if (node.has_attr("axis")) ctx.fail("has attribute 'axis'; Embedding always gathers rows (axis 0)");
  if (!node.has_attr("padding_idx")) ctx.fail("attribute 'padding_idx' is required (plain rows are Gather)");
  const int64_t padding_idx = node.attr_int("padding_idx", 0);
  const Shape& weight = ctx.input_shape(0);
  if (padding_idx < 0) ctx.fail(fmt("padding_idx ", padding_idx, " is negative"));
  if (weight.rank_known && weight.rank() > 0 && weight.dims[0].is_static() && padding_idx >= weight.dims[0].value)
    ctx.fail(fmt("padding_idx ", padding_idx, " is out of range for input 0 (weight) ", to_string(weight)));
  infer_gather(ctx);
}

void infer_concat(InferenceContext& ctx) {
  const Node& node = ctx.node();
  // Concat-1 defaulted axis to 1; from opset 4 it is required.
  if (!node.has_attr("axis") && !opset_below(node, 4)) ctx.fail("attribute 'axis' is required");
  const int64_t axis = node.attr_int("axis", 1);
  const DType t = ctx.input_dtype(0);
  const Shape* first = nullptr;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) ctx.fail(fmt("input ", i, " is missing"));
    if (ctx.input_dtype(i) != t)
      ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", input 0 has ",
                   dtype_name(t)));
    if (!first && ctx.input_shape(i).rank_known) first = &ctx.input_shape(i);
  }
  if (!first) return ctx.set_output(0, t, Shape::unknown_rank());
  const size_t a = static_cast<size_t>(checked_axis(ctx, axis, first->rank(), "axis"));
  std::vector<Dim> out = first->dims;
  int64_t axis_sum = 0;
  bool axis_static = true;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input_shape(i);
    if (!s.rank_known) {
      axis_static = false;
      continue;
    }
    if (s.rank() != first->rank())
      ctx.fail(fmt("input ", i, " has shape ", to_string(s), ", other inputs rank ", first->rank()));
    for (size_t j = 0; j < out.size(); ++j) {
      const Dim& d = s.dims[j];
      if (j == a) {
        if (d.is_static()) axis_sum += d.value;
        else axis_static = false;
      } else if (d.is_static()) {
        if (out[j].is_static() && out[j].value != d.value)
          ctx.fail(fmt("input ", i, " has shape ", to_string(s), ", which does not match ",
                       to_string(*first), " outside axis ", a));
        out[j] = d;
      }
    }
  }
  out[a] = axis_static ? Dim(axis_sum) : Dim();
  ctx.set_output(0, t, Shape(std::move(out)));
}

void infer_split(InferenceContext& ctx) {
  const Node& node = ctx.node();
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  const int n = node.num_outputs();
  std::vector<int64_t> sizes;
  const ArgState state = read_ints_arg(ctx, 1, "split", sizes);
  if (!in.rank_known) {
    for (int i = 0; i < n; ++i) ctx.set_output(i, t, Shape::unknown_rank());
    return;
  }
  const size_t a = static_cast<size_t>(checked_axis(ctx, node.attr_int("axis", 0), in.rank(), "axis"));
  const Dim& d = in.dims[a];
  if (state == ArgState::kKnown) {
    if (static_cast<int>(sizes.size()) != n)
      ctx.fail(fmt("split ", to_string(sizes), " has ", sizes.size(), " sizes for ", n, " outputs"));
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) ctx.fail(fmt("split ", to_string(sizes), " has a negative size"));
      total += s;
    }
    if (d.is_static() && total != d.value)
      ctx.fail(fmt("split ", to_string(sizes), " does not add up to dim ", a, " of input ",
                   to_string(in)));
  } else if (state == ArgState::kAbsent) {
    const int64_t num_outputs = node.attr_int("num_outputs", n);
    if (num_outputs != n) ctx.fail(fmt("num_outputs is ", num_outputs, " but the node has ", n, " outputs"));
    if (d.is_static()) sizes = equal_split_sizes(node.describe(), d.value, n);
  }
  for (int i = 0; i < n; ++i) {
    std::vector<Dim> out = in.dims;
    out[a] = sizes.empty() ? Dim() : Dim(sizes[static_cast<size_t>(i)]);
    ctx.set_output(i, t, Shape(std::move(out)));
  }
}

// Reads Slice's starts/ends/axes/steps: inputs 1-4 (opset >= 10) or attributes (opset 1).
// Returns false when an input's value is not known; `axes_known` then says whether axes are.
bool read_slice_args(const InferenceContext& ctx, SliceArgs& args, bool& axes_known) {
  const Node& node = ctx.node();
  axes_known = true;
  if (!ctx.has_input(1)) {
    if (!node.has_attr("starts") || !node.has_attr("ends"))
      ctx.fail("needs starts and ends (inputs from opset 10, attributes before)");
    args.starts = node.attr_ints("starts", {});
    args.ends = node.attr_ints("ends", {});
    args.axes = node.attr_ints("axes", {});
    return true;
  }
  if (!ctx.has_input(2)) ctx.fail("input 2 (ends) is missing");
  bool known = true;
  std::vector<int64_t>* dst[] = {&args.starts, &args.ends, &args.axes, &args.steps};  // inputs 1-4
  for (int i = 1; i <= 4; ++i) {
    if (read_ints_arg(ctx, i, "", *dst[i - 1]) == ArgState::kUnknown) {
      known = false;
      if (i == 3) axes_known = false;
    }
  }
  return known;
}

void infer_slice(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  SliceArgs args;
  bool axes_known = true;
  const bool known = read_slice_args(ctx, args, axes_known);
  if (!in.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  const int64_t r = in.rank();
  if (!axes_known) return ctx.set_output(0, t, dynamic_shape(r));
  std::vector<Dim> out = in.dims;
  if (!known) {
    // Axes known, bounds not: the sliced axes become dynamic, the others stay.
    if (args.axes.empty()) {  // no axes input: axes 0 .. len(starts) - 1
      std::optional<int64_t> n = static_length(ctx, 1);
      const Tensor* starts = ctx.input_value(1);
      if (starts && starts->defined()) n = static_cast<int64_t>(args.starts.size());
      if (!n) return ctx.set_output(0, t, dynamic_shape(r));
      for (int64_t i = 0; i < std::min(*n, r); ++i) args.axes.push_back(i);
    }
    for (int64_t axis : args.axes) out[static_cast<size_t>(checked_axis(ctx, axis, r, "axis"))] = Dim();
    return ctx.set_output(0, t, Shape(std::move(out)));
  }
  normalize_slice_args(ctx.node().describe(), args, r);
  for (size_t i = 0; i < args.axes.size(); ++i) {
    Dim& d = out[static_cast<size_t>(args.axes[i])];
    if (d.is_static()) {
      d = Dim(slice_axis(d.value, args.starts[i], args.ends[i], args.steps[i]).length);
    } else {
      // Only x[0:INT_MAX] (the exporters' "to the end") keeps a dynamic dim as it is.
      const bool whole = args.starts[i] == 0 && args.steps[i] == 1 &&
                         args.ends[i] >= std::numeric_limits<int32_t>::max();
      if (!whole) d = Dim();
    }
  }
  ctx.set_output(0, t, Shape(std::move(out)));
}

}  // namespace

void register_select_schemas(OpRegistry& r) {
  r.add({.name = "Gather", .min_inputs = 2, .max_inputs = 2, .infer = infer_gather});
  r.add({.name = "Concat", .min_inputs = 1, .max_inputs = OpSchema::kVariadic, .infer = infer_concat});
  r.add({.name = "Split", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1,
         .max_outputs = OpSchema::kVariadic, .infer = infer_split});
  r.add({.name = "Slice", .min_inputs = 1, .max_inputs = 5, .infer = infer_slice});
  r.add({.domain = std::string(kTrainrtDomain), .name = "Embedding", .min_inputs = 2, .max_inputs = 2,
         .infer = infer_embedding});
}

}  // namespace trainrt
