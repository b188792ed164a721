// ArgMax, ArgMin (ONNX opset 11/12/13): the i64 index of the largest (smallest) element along
// `axis` (negative from the end), the first one unless select_last_index = 1; keepdims (default 1)
// keeps the axis as a dim of 1. Integer outputs: no gradient.
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void infer_arg_reduce(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  if (!in.rank_known) return ctx.set_output(0, DType::kI64, Shape::unknown_rank());
  const int64_t axis = checked_axis(ctx, ctx.node().attr_int("axis", 0), in.rank(), "axis");
  std::vector<Dim> out = in.dims;
  if (ctx.node().attr_int("keepdims", 1) != 0) out[static_cast<size_t>(axis)] = Dim(1);
  else out.erase(out.begin() + axis);
  ctx.set_output(0, DType::kI64, Shape(std::move(out)));
}

}  // namespace

void register_arg_reduce_schemas(OpRegistry& r) {
  for (const char* op : {"ArgMax", "ArgMin"})
    r.add({.domain = "", .name = op, .min_inputs = 1, .max_inputs = 1, .infer = infer_arg_reduce});
}

}  // namespace trainrt
