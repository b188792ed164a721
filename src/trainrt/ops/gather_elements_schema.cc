// GatherElements (ONNX opset 11/13): out[i][j][k] = data[index[i][j][k]][j][k] for axis 0, and so
// on for the other axes. The output has the shape of `indices`; indices may be negative.
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void infer_gather_elements(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  const Shape& data = ctx.input_shape(0);
  const Shape& indices = ctx.input_shape(1);
  if (data.rank_known && indices.rank_known) {
    if (data.rank() != indices.rank())
      ctx.fail(fmt("data ", to_string(data), " and indices ", to_string(indices), " must have the same rank"));
    checked_axis(ctx, ctx.node().attr_int("axis", 0), data.rank(), "axis");
  }
  ctx.set_output(0, ctx.input_dtype(0), indices);
}

// ScatterElements (opset 11/13/16/18): data's shape; updates shaped like indices.
void infer_scatter_elements(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64, DType::kI32});
  const std::string reduction = ctx.node().attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
    ctx.fail(fmt("reduction '", reduction, "' is not one of none, add, mul, max, min"));
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) ctx.fail("updates must have data's dtype");
  const Shape& data = ctx.input_shape(0);
  if (data.rank_known) checked_axis(ctx, ctx.node().attr_int("axis", 0), data.rank(), "axis");
  ctx.set_output(0, ctx.input_dtype(0), data);
}

}  // namespace

void register_gather_elements_schema(OpRegistry& r) {
  r.add({.domain = "", .name = "ScatterElements", .min_inputs = 3, .max_inputs = 3, .infer = infer_scatter_elements});
  r.add({.domain = "", .name = "GatherElements", .min_inputs = 2, .max_inputs = 2, .infer = infer_gather_elements});
}

}  // namespace trainrt
