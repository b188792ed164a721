// Pad (ONNX opset 11/13/18/19/21) and its gradient PadGrad (com.trainrt).
//
//   out = Pad(data, pads, [constant_value], [axes]), attribute mode: constant (default), reflect,
//   edge, wrap. pads holds the begins then the ends of the padded axes (all axes, or `axes`);
//   negative pads crop. Each output dim is d + begin + end.
//   dX = PadGrad(dY, shape, pads, [axes]), same mode: each dY element added to the data element it
//   was read from (reflect, edge and wrap read some several times; constant's padding reads none).
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

void check_mode(InferenceContext& ctx) {
  const std::string mode = ctx.node().attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail(fmt("mode '", mode, "' is not one of constant, reflect, edge, wrap"));
}

// (begin, end) per axis of a rank-r tensor, from pads input `p` and axes input `a` when known.
std::optional<std::vector<std::pair<int64_t, int64_t>>> read_pads(InferenceContext& ctx, int p, int a, int64_t r) {
  const Tensor* pads = ctx.input_value(p);
  if (!pads || !pads->defined()) return std::nullopt;
  std::vector<int64_t> axes;
  if (ctx.has_input(a)) {
    const Tensor* given = ctx.input_value(a);
    if (!given || !given->defined()) return std::nullopt;
    for (int64_t axis : given->to_i64_vector()) axes.push_back(checked_axis(ctx, axis, r, "axes"));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const std::vector<int64_t> v = pads->to_i64_vector();
  if (v.size() != 2 * axes.size())
    ctx.fail(fmt("pads has ", v.size(), " values, expected ", 2 * axes.size(), " (begins and ends of ", axes.size(),
                 " axes)"));
  std::vector<std::pair<int64_t, int64_t>> out(static_cast<size_t>(r), {0, 0});
  for (size_t i = 0; i < axes.size(); ++i) out[static_cast<size_t>(axes[i])] = {v[i], v[i + axes.size()]};
  return out;
}

void infer_pad(InferenceContext& ctx) {
  check_mode(ctx);
  ctx.expect_dtype(1, {DType::kI64});
  const Shape& in = ctx.input_shape(0);
  if (!in.rank_known) return ctx.set_output(0, ctx.input_dtype(0), Shape::unknown_rank());
  const auto pads = read_pads(ctx, 1, 3, in.rank());
  if (!pads) return ctx.set_output(0, ctx.input_dtype(0), dynamic_shape(in.rank()));
  std::vector<Dim> out = in.dims;
  for (size_t d = 0; d < out.size(); ++d) {
    const auto [begin, end] = (*pads)[d];
    if (!out[d].is_static()) {
      if (begin != 0 || end != 0) out[d] = Dim();
      continue;
    }
    const int64_t n = out[d].value + begin + end;
    if (n < 0) ctx.fail(fmt("pads crop axis ", d, " of size ", out[d].value, " below 0"));
    out[d] = Dim(n);
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

void infer_pad_grad(InferenceContext& ctx) {
  check_mode(ctx);
  ctx.expect_dtype(1, {DType::kI64});
  ctx.expect_dtype(2, {DType::kI64});
  ctx.set_output(0, ctx.input_dtype(0), shape_of_dims_input(ctx, 1));
}

}  // namespace

void register_pad_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "Pad", .min_inputs = 2, .max_inputs = 4, .infer = infer_pad});
  r.add({.domain = std::string(kTrainrtDomain), .name = "PadGrad", .min_inputs = 3, .max_inputs = 4,
         .infer = infer_pad_grad});
}

}  // namespace trainrt
