// Schemas of the pooling ops (ONNX opset 22 semantics; the window arithmetic is pool_geometry.h)
// and their TrainRT-domain gradient ops (autodiff/pool_gradients.cc emits them):
//   MaxPool(X) -> (Y, [Indices])          AveragePool(X) -> Y
//   GlobalMaxPool(X) -> Y                 GlobalAveragePool(X) -> Y         Y: (N, C, 1, ..., 1)
//   MaxPoolGrad(dY, X) -> dX              the argmax of each window is found again in X
//   MaxPoolWithArgmax(X) -> (Y, Argmax)   Argmax: u8, Y's shape: each window's first largest tap as
//                                         its index among the kernel's taps (row major), 255 for
//                                         none; kernel_shape of at most 255 taps
//   MaxPoolArgmaxGrad(dY, Argmax, X_shape) -> dX   dY routed to the taps Argmax names
//   AveragePoolGrad(dY, X_shape) -> dX    X_shape: X's dims as a 1-D i64 value
// The gradient ops carry the forward node's attributes; without kernel_shape the window is the
// whole spatial extent (the gradients of the global pools).
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/pool_geometry.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// Y's shape for X's (possibly symbolic) shape: N and C kept, spatial dims pooled where static.
Shape pooled_shape(InferenceContext& ctx, const Shape& x) {
  const PoolAttributes a = PoolAttributes::of(ctx.node());
  if (!x.rank_known) return Shape::unknown_rank();
  if (x.rank() < 3 || (!a.global && x.rank() != static_cast<int64_t>(a.kernel.size()) + 2))
    ctx.fail(fmt("input 0 has shape ", to_string(x), ", expected (N, C, ",
                 a.global ? "d1, ..., dk)" : fmt(a.kernel.size(), " spatial dims) for kernel_shape ",
                                                 to_string(a.kernel))));
  Shape y = x;
  for (int64_t i = 0; i + 2 < x.rank(); ++i) {
    Dim& d = y.dims[static_cast<size_t>(i + 2)];
    if (!d.is_static()) {
      d = Dim();
      continue;
    }
    d = Dim(a.output_size(i, d.value));
    if (d.value < 1)
      ctx.fail(fmt("the window of kernel_shape ", to_string(a.kernel), " does not fit input 0 of shape ",
                   to_string(x)));
  }
  return y;
}

void infer_max_pool(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16, DType::kI8, DType::kU8});
  if (ctx.node().attr_int("storage_order", 0) != 0 && ctx.node().attr_int("storage_order", 0) != 1)
    ctx.fail("storage_order must be 0 (row major) or 1 (column major)");
  const Shape y = pooled_shape(ctx, ctx.input_shape(0));
  ctx.set_output(0, ctx.input_dtype(0), y);
  ctx.set_output(1, DType::kI64, y);
}

void infer_max_pool_with_argmax(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16});
  const PoolAttributes a = PoolAttributes::of(ctx.node());
  int64_t taps = 1;
  for (int64_t k : a.kernel) taps *= k;
  if (a.global || taps > 255)
    ctx.fail(fmt("kernel_shape ", to_string(a.kernel), " has ", a.global ? "no" : std::to_string(taps),
                 " taps; output 1 (Argmax, u8) holds a tap index below 255"));
  const Shape y = pooled_shape(ctx, ctx.input_shape(0));
  ctx.set_output(0, ctx.input_dtype(0), y);
  ctx.set_output(1, DType::kU8, y);
}

void infer_average_pool(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16});
  ctx.set_output(0, ctx.input_dtype(0), pooled_shape(ctx, ctx.input_shape(0)));
}

// dY must have the pooled shape of X's.
void expect_pooled(InferenceContext& ctx, const Shape& x) {
  const Shape y = pooled_shape(ctx, x);
  const Shape& dy = ctx.input_shape(0);
  if (!y.rank_known || !dy.rank_known) return;
  bool match = y.rank() == dy.rank();
  for (size_t i = 0; match && i < y.dims.size(); ++i)
    match = !(y.dims[i].is_static() && dy.dims[i].is_static() && y.dims[i].value != dy.dims[i].value);
  if (!match)
    ctx.fail(fmt("input 0 (dY) has shape ", to_string(dy), ", expected ", to_string(y), " for X of shape ",
                 to_string(x)));
}

void infer_max_pool_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16});
  if (ctx.input_dtype(1) != ctx.input_dtype(0))
    ctx.fail(fmt("input 1 (X) has dtype ", dtype_name(ctx.input_dtype(1)), ", expected ",
                 dtype_name(ctx.input_dtype(0)), " like input 0"));
  expect_pooled(ctx, ctx.input_shape(1));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(1));
}

// X's shape from input `i` (X_shape, 1-D i64): its values when constant, else its rank with dY's N, C.
Shape x_shape_input(InferenceContext& ctx, int i) {
  ctx.expect_dtype(i, {DType::kI64});
  Shape x = Shape::unknown_rank();
  if (const Tensor* dims = ctx.input_value(i)) {
    x = Shape::of(dims->to_i64_vector());
  } else if (const Shape& s = ctx.input_shape(i); s.rank_known && s.rank() == 1 && s.dims[0].is_static()) {
    x = Shape(std::vector<Dim>(static_cast<size_t>(s.dims[0].value)));
    const Shape& dy = ctx.input_shape(0);
    if (dy.rank_known && dy.rank() == x.rank()) x.dims[0] = dy.dims[0], x.dims[1] = dy.dims[1];
  }
  return x;
}

void infer_average_pool_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16});
  Shape x = x_shape_input(ctx, 1);
  expect_pooled(ctx, x);
  ctx.set_output(0, ctx.input_dtype(0), std::move(x));
}

void infer_max_pool_argmax_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kBF16});
  ctx.expect_dtype(1, {DType::kU8});
  Shape x = x_shape_input(ctx, 2);
  expect_pooled(ctx, x);
  ctx.set_output(0, ctx.input_dtype(0), std::move(x));
}

}  // namespace

void register_pool_schemas(OpRegistry& r) {
  r.add({.name = "MaxPool", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 2,
         .infer = infer_max_pool});
  r.add({.name = "AveragePool", .min_inputs = 1, .max_inputs = 1, .infer = infer_average_pool});
  r.add({.name = "GlobalMaxPool", .min_inputs = 1, .max_inputs = 1, .infer = infer_max_pool});
  r.add({.name = "GlobalAveragePool", .min_inputs = 1, .max_inputs = 1, .infer = infer_average_pool});
  const std::string trainrt(kTrainrtDomain);
  r.add({.domain = trainrt, .name = "MaxPoolGrad", .min_inputs = 2, .max_inputs = 2, .infer = infer_max_pool_grad});
  r.add({.domain = trainrt, .name = "AveragePoolGrad", .min_inputs = 2, .max_inputs = 2,
         .infer = infer_average_pool_grad});
  r.add({.domain = trainrt, .name = "MaxPoolWithArgmax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 2,
         .max_outputs = 2, .infer = infer_max_pool_with_argmax});
  r.add({.domain = trainrt, .name = "MaxPoolArgmaxGrad", .min_inputs = 3, .max_inputs = 3,
         .infer = infer_max_pool_argmax_grad});
}

}  // namespace trainrt
