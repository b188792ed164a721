// TopK (ONNX opset 10/11): (Values, Indices) = TopK(X, K (1 element, i64)), attributes axis (-1),
// largest (1), sorted (1): the K largest (smallest) elements along axis, in order, ties by lower
// index first, NaN as the largest (torch's topk). Indices are i64; the gradient flows through the
// values: dX = GatherElementsGrad(dims(X), Indices, dValues, axis).
//
// TopKInTorchOrder (com.trainrt): the same inputs, outputs and attributes, with equal elements in
// the order torch's CPU topk leaves them (its partial sort or selection, not by index): what
// RTModule captures torch.topk as, so that a router whose scores tie (a zero-initialized gate)
// picks the experts eager picks. With sorted = 0 the K come in the order torch's selection leaves.
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void infer_top_k(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  const Shape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), Shape::unknown_rank());
    return ctx.set_output(1, DType::kI64, Shape::unknown_rank());
  }
  const int64_t axis = checked_axis(ctx, ctx.node().attr_int("axis", -1), in.rank(), "axis");
  std::vector<Dim> out = in.dims;
  const Tensor* k = ctx.input_value(1);
  if (k && k->defined()) {
    if (k->numel() != 1) ctx.fail("K must hold one value");
    const int64_t kv = k->to_i64(0);
    const Dim& d = in.dims[static_cast<size_t>(axis)];
    if (kv < 0 || (d.is_static() && kv > d.value))
      ctx.fail(fmt("K = ", kv, " is outside [0, ", d.is_static() ? std::to_string(d.value) : "dim", "]"));
    out[static_cast<size_t>(axis)] = Dim(kv);
  } else {
    out[static_cast<size_t>(axis)] = Dim();
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(out));
  ctx.set_output(1, DType::kI64, Shape(std::move(out)));
}

}  // namespace

void register_top_k_schema(OpRegistry& r) {
  r.add({.domain = "", .name = "TopK", .min_inputs = 2, .max_inputs = 2, .min_outputs = 2, .max_outputs = 2,
         .infer = infer_top_k});
  r.add({.domain = std::string(kTrainrtDomain), .name = "TopKInTorchOrder", .min_inputs = 2, .max_inputs = 2, .min_outputs = 2,
         .max_outputs = 2, .infer = infer_top_k});
}

}  // namespace trainrt
