// GatherND (ONNX opset 11/12/13) and its gradient GatherNDGrad (com.trainrt).
//
//   out = GatherND(data (d0, ..., d_{r-1}), indices (i0, ..., i_{q-2}, k)), attribute batch_dims b:
//   each index tuple (k coordinates into dims b .. b+k-1 of one batch's data) selects a slice of
//   dims d_{b+k} ..; out has dims i0 .. i_{q-2} then d_{b+k} .. d_{r-1}. Coordinates may be
//   negative (from the end). The exporters write it for x[rows, cols] with index tensors.
//   dX = GatherNDGrad(shape, indices, dY): zeros of `shape`, each dY slice added where its forward
//   slice came from (repeated tuples accumulate).
//   out = ScatterND(data, indices, updates), attribute reduction (none, add, mul, max, min): data
//   with each update slice written (none) or combined (the others) at its index tuple; updates have the shape GatherND
//   of data by indices would give. Its gradient (none and add only): dData = dY (add), or dY with
//   the written slices zeroed (ScatterND of zeros); dUpdates = GatherND(dY, indices).
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

// The output shape of GatherND, or unknown rank when a rank or k is not known.
Shape gather_nd_shape(InferenceContext& ctx, const Shape& data, const Shape& indices) {
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (!data.rank_known || !indices.rank_known) return Shape::unknown_rank();
  const int64_t r = static_cast<int64_t>(data.rank()), q = static_cast<int64_t>(indices.rank());
  if (q < 1) ctx.fail("indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q)) ctx.fail(fmt("batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))"));
  const Dim& last = indices.dims.back();
  if (!last.is_static()) return Shape::unknown_rank();
  const int64_t k = last.value;
  if (k < 1 || b + k > r)
    ctx.fail(fmt("indices' last dim ", k, " must be in [1, rank(data) - batch_dims] = [1, ", r - b, "]"));
  std::vector<Dim> out(indices.dims.begin(), indices.dims.end() - 1);
  out.insert(out.end(), data.dims.begin() + b + k, data.dims.end());
  return Shape(std::move(out));
}

void infer_gather_nd(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  ctx.set_output(0, ctx.input_dtype(0), gather_nd_shape(ctx, ctx.input_shape(0), ctx.input_shape(1)));
}

void infer_gather_nd_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kI64});
  ctx.expect_dtype(1, {DType::kI64});
  ctx.expect_dtype(2, {DType::kF32, DType::kF64});
  Shape dx = shape_of_dims_input(ctx, 0);
  if (dx.rank_known) {
    const Shape want = gather_nd_shape(ctx, dx, ctx.input_shape(1));
    const Shape& dy = ctx.input_shape(2);
    if (want.is_static() && dy.is_static() && want != dy)
      ctx.fail(fmt("input 2 (dY) has shape ", to_string(dy), ", expected ", to_string(want)));
  }
  ctx.set_output(0, ctx.input_dtype(2), std::move(dx));
}

void infer_scatter_nd(InferenceContext& ctx) {
  ctx.expect_dtype(1, {DType::kI64});
  const std::string reduction = ctx.node().attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
    ctx.fail(fmt("reduction '", reduction, "' is not one of none, add, mul, max, min"));
  if (ctx.input_dtype(2) != ctx.input_dtype(0)) ctx.fail("updates must have data's dtype");
  const Shape want = gather_nd_shape(ctx, ctx.input_shape(0), ctx.input_shape(1));
  const Shape& updates = ctx.input_shape(2);
  if (want.is_static() && updates.is_static() && want != updates)
    ctx.fail(fmt("input 2 (updates) has shape ", to_string(updates), ", expected ", to_string(want)));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

}  // namespace

void register_gather_nd_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "ScatterND", .min_inputs = 3, .max_inputs = 3, .infer = infer_scatter_nd});
  r.add({.domain = "", .name = "GatherND", .min_inputs = 2, .max_inputs = 2, .infer = infer_gather_nd});
  r.add({.domain = std::string(kTrainrtDomain), .name = "GatherNDGrad", .min_inputs = 3, .max_inputs = 3,
         .infer = infer_gather_nd_grad});
}

}  // namespace trainrt
