// Schemas of the TrainRT-domain gradient ops of the reduction family (the gradient rules in
// autodiff/reduction_gradients.cc and its siblings emit them; CPU kernels in kernels/cpu):
//   ReduceSumToShape(X, shape) -> Y                      the gradient of a broadcast
//   SoftmaxGrad(dY, Y), LogSoftmaxGrad(dY, Y) -> dX      attribute axis (opset-13 semantics)
//   LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) -> (dX, dScale, dBias)
//   SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, [weights]) -> dX
//   NegativeLogLikelihoodLossGrad(dLoss, shape, labels, [weights]) -> dX
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// ReduceSumToShape(X, shape) -> Y of dims `shape`: X summed over the axes along which a tensor of
// dims `shape` would be broadcast to X's dims (the gradient of a broadcast).
void infer_reduce_sum_to_shape(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  DType t = ctx.input_dtype(0);
  if (const Tensor* target = ctx.input_value(1)) {
    std::vector<int64_t> dims = target->to_i64_vector();
    const Shape& x = ctx.input_shape(0);
    if (x.rank_known && static_cast<int64_t>(dims.size()) > x.rank())
      ctx.fail(fmt("target shape ", to_string(dims), " has more axes than input ", to_string(x)));
    ctx.set_output(0, t, Shape::of(dims));
    return;
  }
  const Shape& s = ctx.input_shape(1);
  if (s.rank_known && s.rank() == 1 && s.dims[0].is_static())
    ctx.set_output(0, t, Shape(std::vector<Dim>(static_cast<size_t>(s.dims[0].value))));
  else
    ctx.set_output(0, t, Shape::unknown_rank());
}

void expect_float(const InferenceContext& ctx, int i) {
  ctx.expect_dtype(i, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
}

// Fails unless input i has input 0's dtype.
void expect_same_dtype(const InferenceContext& ctx, int i, const char* what) {
  if (ctx.input_dtype(i) != ctx.input_dtype(0))
    ctx.fail(fmt("input ", i, " (", what, ") has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                 dtype_name(ctx.input_dtype(0)), " like input 0"));
}

// The shape of two inputs that must have equal shapes: the more known one; fails when static
// dims differ.
Shape same_shape(const InferenceContext& ctx, int a, int b) {
  const Shape& sa = ctx.input_shape(a);
  const Shape& sb = ctx.input_shape(b);
  if (!sa.rank_known) return sb;
  if (!sb.rank_known) return sa;
  bool match = sa.rank() == sb.rank();
  for (size_t i = 0; match && i < sa.dims.size(); ++i)
    match = !(sa.dims[i].is_static() && sb.dims[i].is_static() && sa.dims[i].value != sb.dims[i].value);
  if (!match) ctx.fail(fmt("inputs ", a, " and ", b, " have shapes ", to_string(sa), " and ", to_string(sb),
                           "; they must match"));
  return sa.is_static() ? sa : sb;
}

// SoftmaxGrad / LogSoftmaxGrad(dY, Y) -> dX, all of Y's shape; axis (default -1) in range.
void infer_softmax_grad(InferenceContext& ctx) {
  expect_float(ctx, 0);
  expect_same_dtype(ctx, 1, "Y");
  Shape s = same_shape(ctx, 0, 1);
  const int64_t axis = ctx.node().attr_int("axis", -1);
  if (s.rank_known && (axis < -s.rank() || axis >= s.rank()))
    ctx.fail(fmt("axis ", axis, " is out of range for shape ", to_string(s)));
  ctx.set_output(0, ctx.input_dtype(0), std::move(s));
}

// LayerNormalizationGrad(dY, X, scale, [mean, inv_std]) -> dX (X's shape), dScale and dBias
// (X's dims from axis on: the normalized shape).
void infer_layer_norm_grad(InferenceContext& ctx) {
  expect_float(ctx, 0);
  expect_same_dtype(ctx, 1, "X");
  expect_same_dtype(ctx, 2, "scale");
  if (ctx.has_input(3) != ctx.has_input(4)) ctx.fail("inputs 3 (mean) and 4 (inv_std) must be given together");
  const Shape x = same_shape(ctx, 0, 1);
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, x);
  Shape norm = Shape::unknown_rank();
  if (x.rank_known) {
    const int64_t axis = ctx.node().attr_int("axis", -1);
    if (axis < -x.rank() || axis >= x.rank())
      ctx.fail(fmt("axis ", axis, " is out of range for X of shape ", to_string(x)));
    norm = Shape(std::vector<Dim>(x.dims.begin() + (axis < 0 ? axis + x.rank() : axis), x.dims.end()));
  }
  ctx.set_output(1, t, norm);
  ctx.set_output(2, t, norm);
}

// Labels i32/i64 with one dim less than the gradient; optional weights (C) of the dtype.
void check_loss_grad_inputs(InferenceContext& ctx, const Shape& dx) {
  expect_float(ctx, 0);
  ctx.expect_dtype(2, {DType::kI32, DType::kI64});
  const Shape& labels = ctx.input_shape(2);
  if (dx.rank_known && labels.rank_known && labels.rank() != dx.rank() - 1)
    ctx.fail(fmt("input 2 (labels) has shape ", to_string(labels), ", expected (N, d1, ..., dk) for a gradient of "
                 "shape ", to_string(dx)));
  if (ctx.has_input(3)) {
    expect_same_dtype(ctx, 3, "weights");
    const Shape& w = ctx.input_shape(3);
    if (w.rank_known && w.rank() != 1) ctx.fail(fmt("input 3 (weights) has shape ", to_string(w), ", expected (C)"));
  }
}

// SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, [weights]) -> dX of log_prob's shape.
void infer_softmax_cross_entropy_grad(InferenceContext& ctx) {
  expect_same_dtype(ctx, 1, "log_prob");
  const Shape& log_prob = ctx.input_shape(1);
  if (log_prob.rank_known && log_prob.rank() < 2)
    ctx.fail(fmt("input 1 (log_prob) has shape ", to_string(log_prob), ", expected (N, C, d1, ..., dk)"));
  check_loss_grad_inputs(ctx, log_prob);
  ctx.set_output(0, ctx.input_dtype(0), log_prob);
}

// NegativeLogLikelihoodLossGrad(dLoss, shape, labels, [weights]) -> dX of dims `shape` (the
// forward scores' shape, a 1-D i64 value known at run time).
void infer_nll_grad(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  Shape dx = Shape::unknown_rank();
  if (const Tensor* dims = ctx.input_value(1)) {
    dx = Shape::of(dims->to_i64_vector());
  } else {
    const Shape& s = ctx.input_shape(1);
    if (s.rank_known && s.rank() == 1 && s.dims[0].is_static())
      dx = Shape(std::vector<Dim>(static_cast<size_t>(s.dims[0].value)));
  }
  if (dx.rank_known && dx.rank() < 2)
    ctx.fail(fmt("input 1 (shape) gives ", to_string(dx), ", expected (N, C, d1, ..., dk)"));
  check_loss_grad_inputs(ctx, dx);
  ctx.set_output(0, ctx.input_dtype(0), std::move(dx));
}

}  // namespace

void register_reduction_grad_schemas(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "ReduceSumToShape", .min_inputs = 2, .max_inputs = 2,
         .infer = infer_reduce_sum_to_shape, .view_when_same_dims = true});
  const std::string trainrt(kTrainrtDomain);
  // dX[j] is computed from dY[j] and Y[j] once the row's (or column's) sum is known.
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"})
    r.add({.domain = trainrt, .name = op, .min_inputs = 2, .max_inputs = 2, .infer = infer_softmax_grad,
           .inplace = {{0, 0}}});
  r.add({.domain = trainrt, .name = "LayerNormalizationGrad", .min_inputs = 3, .max_inputs = 5, .min_outputs = 1,
         .max_outputs = 3, .infer = infer_layer_norm_grad});
  // dX[j] = exp(log_prob[j]) * s, then the label's element: log_prob may be overwritten.
  r.add({.domain = trainrt, .name = "SoftmaxCrossEntropyLossGrad", .min_inputs = 3, .max_inputs = 4,
         .infer = infer_softmax_cross_entropy_grad, .inplace = {{1, 0}}});
  r.add({.domain = trainrt, .name = "NegativeLogLikelihoodLossGrad", .min_inputs = 3, .max_inputs = 4,
         .infer = infer_nll_grad});
}

}  // namespace trainrt
