// Schemas of the ops that produce values from shapes or attributes (Shape, Size, Constant,
// ConstantOfShape, Range), plus Trilu and Dropout. Shape, Size and Constant also set their output
// value at inference when it is known, so the planner can fold shape computations.
#include <algorithm>
#include <cmath>

#include "trainrt/ops/tensor_op_args.h"
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

// Shape-15: dims [start, end) of the input, both clamped into [0, rank] after adding rank to
// negative ones.
void infer_shape(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (!in.rank_known) return ctx.set_output(0, DType::kI64, dynamic_shape(1));
  const int64_t r = in.rank();
  const auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = clamp(ctx.node().attr_int("start", 0));
  const int64_t end = clamp(ctx.node().attr_int("end", r));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) {
    const Dim& d = in.dims[static_cast<size_t>(i)];
    if (!d.is_static()) return ctx.set_output(0, DType::kI64, Shape({Dim(end - start)}));
    dims.push_back(d.value);
  }
  ctx.set_output_value(0, Tensor::from_i64(dims));
}

void infer_size(InferenceContext& ctx) {
  std::optional<int64_t> n = ctx.input_shape(0).numel();
  if (n) ctx.set_output_value(0, Tensor::scalar<int64_t>(*n));
  else ctx.set_output(0, DType::kI64, Shape());
}

void infer_constant(InferenceContext& ctx) { ctx.set_output_value(0, constant_value(ctx.node())); }

// ConstantOfShape: a tensor of the input's dims filled with `value` (one element; default f32 0).
void infer_constant_of_shape(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kI64});
  const Tensor* fill = ctx.node().attr_tensor("value");
  if (fill && fill->numel() != 1)
    ctx.fail(fmt("attribute 'value' must hold one element, it is ", describe(*fill)));
  const DType t = fill ? fill->dtype() : DType::kF32;
  const Tensor* dims = ctx.input_value(0);
  if (!dims || !dims->defined()) return ctx.set_output(0, t, dynamic_shape(static_length(ctx, 0)));
  std::vector<int64_t> v = dims->to_i64_vector();
  for (int64_t d : v)
    if (d < 0) ctx.fail(fmt("input shape ", to_string(v), " has a negative dim"));
  ctx.set_output(0, t, Shape::of(v));
}

// Range-11: max(ceil((limit - start) / delta), 0) elements start + i * delta.
int64_t range_length(const InferenceContext& ctx, const Tensor& start, const Tensor& limit,
                     const Tensor& delta) {
  if (is_integer(start.dtype())) {
    const int64_t s = start.to_i64(0), l = limit.to_i64(0), d = delta.to_i64(0);
    if (d == 0) ctx.fail("delta is 0");
    const int64_t diff = l - s;
    const int64_t n = diff / d + ((diff % d != 0 && (diff > 0) == (d > 0)) ? 1 : 0);
    return std::max<int64_t>(n, 0);
  }
  const double s = start.to_double(0), l = limit.to_double(0), d = delta.to_double(0);
  if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
    ctx.fail(fmt("start ", s, ", limit ", l, ", delta ", d, " do not give a finite range"));
  const double n = std::ceil((l - s) / d);
  if (n > static_cast<double>(int64_t{1} << 62))
    ctx.fail(fmt("start ", s, ", limit ", l, ", delta ", d, " give too many elements"));
  return std::max<int64_t>(static_cast<int64_t>(n), 0);
}

void infer_range(InferenceContext& ctx) {
  const DType t = ctx.input_dtype(0);
  if (t == DType::kBool) ctx.fail("Range does not take bool inputs");
  for (int i = 0; i < 3; ++i) {
    if (ctx.input_dtype(i) != t)
      ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", input 0 has ",
                   dtype_name(t)));
    const Shape& s = ctx.input_shape(i);
    if (s.rank_known && s.numel() != std::optional<int64_t>(1))
      ctx.fail(fmt("input ", i, " has shape ", to_string(s), ", expected a scalar"));
  }
  const Tensor *start = ctx.input_value(0), *limit = ctx.input_value(1), *delta = ctx.input_value(2);
  if (!start || !limit || !delta || !start->defined() || !limit->defined() || !delta->defined())
    return ctx.set_output(0, t, dynamic_shape(1));
  ctx.set_output(0, t, Shape({Dim(range_length(ctx, *start, *limit, *delta))}));
}

// Trilu: the upper (or lower) triangle of the last two dims, from diagonal k.
void infer_trilu(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (in.rank_known && in.rank() < 2)
    ctx.fail(fmt("input 0 has shape ", to_string(in), ", expected rank >= 2"));
  if (ctx.has_input(1)) ctx.expect_dtype(1, {DType::kI64});
  ctx.set_output(0, ctx.input_dtype(0), in);
}

// Dropout-13: (data, ratio?, training_mode?) -> (output, mask?). The mask is bool from opset 10
// and the data type before.
void infer_dropout(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
  if (ctx.has_input(1)) ctx.expect_dtype(1, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
  if (ctx.has_input(2)) ctx.expect_dtype(2, {DType::kBool});
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, ctx.input_shape(0));
  if (ctx.has_output(1))
    ctx.set_output(1, opset_below(ctx.node(), 10) ? t : DType::kBool, ctx.input_shape(0));
}

}  // namespace

void register_source_schemas(OpRegistry& r) {
  r.add({.name = "Shape", .min_inputs = 1, .max_inputs = 1, .infer = infer_shape});
  r.add({.name = "Size", .min_inputs = 1, .max_inputs = 1, .infer = infer_size});
  r.add({.name = "Constant", .min_inputs = 0, .max_inputs = 0, .infer = infer_constant});
  r.add({.name = "ConstantOfShape", .min_inputs = 1, .max_inputs = 1, .infer = infer_constant_of_shape});
  r.add({.name = "Range", .min_inputs = 3, .max_inputs = 3, .infer = infer_range});
  r.add({.name = "Trilu", .min_inputs = 1, .max_inputs = 2, .infer = infer_trilu});
  r.add({.name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
         .infer = infer_dropout, .inplace = {{0, 0}}, .deterministic = false});
}

}  // namespace trainrt
