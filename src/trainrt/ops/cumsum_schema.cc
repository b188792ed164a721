// CumSum-14 (x, axis) -> y: running sums of x along `axis` (a 0-d or 1-element i64/i32 input,
// negative counts back), first to last, or last to first with reverse=1; exclusive=1 leaves out
// each element's own value (y[0] = 0). y has x's dtype and shape.
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void infer_cumsum(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kI32, DType::kI64});
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  const Shape& x = ctx.input_shape(0);
  const Shape& axis = ctx.input_shape(1);
  if (axis.rank_known && axis.rank() > 1)
    ctx.fail(fmt("axis (input 1) has shape ", to_string(axis), ", expected a scalar"));
  const Tensor* value = ctx.input_value(1);
  if (x.rank_known && value && value->defined()) {
    if (value->numel() != 1) ctx.fail(fmt("axis (input 1) has ", value->numel(), " values, expected 1"));
    checked_axis(ctx, value->to_i64(0), x.rank(), "axis");
  }
  ctx.set_output(0, ctx.input_dtype(0), x);
}

}  // namespace

void register_cumsum_schema(OpRegistry& r) {
  r.add({.domain = "", .name = "CumSum", .min_inputs = 2, .max_inputs = 2, .infer = infer_cumsum});
}

}  // namespace trainrt
