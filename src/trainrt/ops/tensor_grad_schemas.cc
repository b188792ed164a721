// Schemas of the TrainRT-domain gradient ops of the shape and data movement family (the rules in
// autodiff/tensor_gradients.cc and select_gradients.cc emit them; CPU kernels in
// kernels/cpu/tensor_grad_kernels.cc):
//   SliceGrad(dY, shape, starts, ends, [axes], [steps]) -> dX     dims `shape`; dY written at the
//       positions Slice(X, starts, ends, axes, steps) read, zeros elsewhere (ONNX Slice-13 clamping)
//   GatherGrad(shape, indices, dY, [addend]) -> dX                dims `shape`, attribute axis;
//       dY's slices summed into the rows `indices` name (repeated indices accumulate); optional
//       attribute padding_idx: that row of dX stays zero (Embedding's gradient, as torch's); with
//       addend (dX's dims and dtype), dX = addend + that, written over addend when it dies here
//       (a tied embedding's gradient accumulated onto the LM head's: no dense temporary, no Sum)
//   GatherElementsGrad(shape, indices, dY) -> dX                  dims `shape`, attribute axis; dY
//       (the indices' shape) added at the positions GatherElements read (kernel in
//       kernels/cpu/gather_elements_kernels.cc)
//   DropoutGrad(dY, mask, [ratio], [training_mode]) -> dX         dY's shape; dY * mask / (1 - ratio)
//       when training_mode is given and true, else dY (ratio defaults to 0.5 as in Dropout-12)
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"
#include "trainrt/ops/tensor_op_args.h"
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void expect_float(const InferenceContext& ctx, int i) {
  ctx.expect_dtype(i, {DType::kF32, DType::kF64, DType::kF16, DType::kBF16});
}

// The dims given by 1-D i64 input `i`: exact when its value is known, else its rank when its
// length is static.
Shape shape_from_input(const InferenceContext& ctx, int i) {
  ctx.expect_dtype(i, {DType::kI64});
  const Tensor* dims = ctx.input_value(i);
  if (!dims || !dims->defined()) return dynamic_shape(static_length(ctx, i));
  const std::vector<int64_t> v = dims->to_i64_vector();
  for (int64_t d : v)
    if (d < 0) ctx.fail(fmt("input ", i, " (shape) ", to_string(v), " has a negative dim"));
  return Shape::of(v);
}

void infer_slice_grad(InferenceContext& ctx) {
  expect_float(ctx, 0);
  for (int i = 2; i <= 5; ++i)
    if (ctx.has_input(i)) ctx.expect_dtype(i, {DType::kI64, DType::kI32});
  Shape dx = shape_from_input(ctx, 1);
  const Shape& dy = ctx.input_shape(0);
  if (dx.rank_known && dy.rank_known && dx.rank() != dy.rank())
    ctx.fail(fmt("input 0 (dY) has shape ", to_string(dy), ", expected rank ", dx.rank(), " like the shape"));
  ctx.set_output(0, ctx.input_dtype(0), std::move(dx));
}

// Whether a and b (ranks known) can be one shape: same rank, equal dims where both are static.
bool may_equal(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (size_t k = 0; k < a.dims.size(); ++k)
    if (a.dims[k].is_static() && b.dims[k].is_static() && a.dims[k].value != b.dims[k].value) return false;
  return true;
}

// dX has `shape`; dY is X's shape with the axis dim replaced by the indices' dims.
void infer_gather_grad(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  ctx.expect_dtype(2, {DType::kF32, DType::kF64, DType::kBF16, DType::kF16});
  Shape dx = shape_from_input(ctx, 0);
  const Shape& indices = ctx.input_shape(1);
  const Shape& dy = ctx.input_shape(2);
  if (dx.rank_known) {
    if (dx.rank() == 0) ctx.fail("input 0 (shape) is empty; Gather needs data of rank >= 1");
    const int64_t a = checked_axis(ctx, ctx.node().attr_int("axis", 0), dx.rank(), "axis");
    const Dim& rows = dx.dims[static_cast<size_t>(a)];
    const int64_t padding_idx = ctx.node().attr_int("padding_idx", 0);
    if (ctx.node().has_attr("padding_idx") && (padding_idx < 0 || (rows.is_static() && padding_idx >= rows.value)))
      ctx.fail(fmt("padding_idx ", padding_idx, " is out of range for ", to_string(dx), " on axis ", a));
    if (indices.rank_known && dy.rank_known && dy.rank() != dx.rank() - 1 + indices.rank())
      ctx.fail(fmt("input 2 (dY) has shape ", to_string(dy), ", expected rank ", dx.rank() - 1 + indices.rank(),
                   " for data of rank ", dx.rank(), " and indices ", to_string(indices)));
  }
  if (ctx.has_input(3)) {
    if (ctx.input_dtype(3) != ctx.input_dtype(2))
      ctx.fail(fmt("input 3 (addend) is ", dtype_name(ctx.input_dtype(3)), ", expected dY's ", dtype_name(ctx.input_dtype(2))));
    const Shape& addend = ctx.input_shape(3);
    if (dx.rank_known && addend.rank_known && !may_equal(dx, addend))
      ctx.fail(fmt("input 3 (addend) has shape ", to_string(addend), ", expected dX's ", to_string(dx)));
    if (!dx.is_static() && addend.rank_known) dx = addend;
  }
  ctx.set_output(0, ctx.input_dtype(2), std::move(dx));
}

// dX has `shape`; indices and dY share one shape of dX's rank.
void infer_gather_elements_grad(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  ctx.expect_dtype(2, {DType::kF32, DType::kF64});
  Shape dx = shape_from_input(ctx, 0);
  const Shape& indices = ctx.input_shape(1);
  const Shape& dy = ctx.input_shape(2);
  if (indices.rank_known && dy.rank_known && !may_equal(indices, dy))
    ctx.fail(fmt("input 2 (dY) has shape ", to_string(dy), ", expected the indices' ", to_string(indices)));
  if (dx.rank_known) {
    if (dy.rank_known && dy.rank() != dx.rank())
      ctx.fail(fmt("input 2 (dY) has shape ", to_string(dy), ", expected rank ", dx.rank(), " like the shape"));
    checked_axis(ctx, ctx.node().attr_int("axis", 0), dx.rank(), "axis");
  }
  ctx.set_output(0, ctx.input_dtype(2), std::move(dx));
}

void infer_dropout_grad(InferenceContext& ctx) {
  expect_float(ctx, 0);
  ctx.expect_dtype(1, {DType::kBool});
  if (ctx.has_input(2)) expect_float(ctx, 2);
  if (ctx.has_input(3)) ctx.expect_dtype(3, {DType::kBool});
  const Shape& dy = ctx.input_shape(0);
  const Shape& mask = ctx.input_shape(1);
  if (dy.is_static() && mask.is_static() && dy != mask)
    ctx.fail(fmt("input 1 (mask) has shape ", to_string(mask), ", expected dY's ", to_string(dy)));
  ctx.set_output(0, ctx.input_dtype(0), dy);
}

}  // namespace

// StopGradient(X) -> X: the value passes unchanged, gradients stop here (torch's detach).
void infer_stop_gradient(InferenceContext& ctx) { ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0)); }

void register_tensor_grad_schemas(OpRegistry& r) {
  const std::string trainrt(kTrainrtDomain);
  r.add({.domain = trainrt, .name = "StopGradient", .min_inputs = 1, .max_inputs = 1, .infer = infer_stop_gradient,
         .inplace = {{0, 0}}});
  r.add({.domain = trainrt, .name = "SliceGrad", .min_inputs = 4, .max_inputs = 6, .infer = infer_slice_grad});
  r.add({.domain = trainrt, .name = "GatherGrad", .min_inputs = 3, .max_inputs = 4, .infer = infer_gather_grad,
         .inplace = {{3, 0}}});
  r.add({.domain = trainrt, .name = "GatherElementsGrad", .min_inputs = 3, .max_inputs = 3,
         .infer = infer_gather_elements_grad});
  // dX[i] depends on dY[i] and mask[i] only.
  r.add({.domain = trainrt, .name = "DropoutGrad", .min_inputs = 2, .max_inputs = 4, .infer = infer_dropout_grad,
         .inplace = {{0, 0}}});
}

}  // namespace trainrt
