// Resize, Upsample (resize_args.h) and ResizeGrad (com.trainrt).
//
//   Y = Resize(X, [roi], [scales], [sizes]): each output pixel interpolated (nearest, linear or cubic
//   taps, per axis) from the input pixels around where it maps to. Y's dims along the resized axes
//   follow from scales (floor(in * scale)) or sizes; the other axes keep X's dims, dynamic ones too.
//   dX = ResizeGrad(dY, dims(X), [roi], [scales], [sizes]), Resize's attributes: each dY element
//   spread back over the taps it was interpolated from, with the same weights (Resize's transpose).
#include "trainrt/ops/resize_args.h"
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

const Tensor* value_or_null(const InferenceContext& ctx, int input, bool& unknown) {
  if (input < 0 || !ctx.has_input(input)) return nullptr;
  const Tensor* v = ctx.input_value(input);
  if (!v || !v->defined()) unknown = true;
  return v && v->defined() ? v : nullptr;
}

// Output dims of the resize of an input of `in` dims, or nullopt while roi / scales / sizes are not known.
std::optional<Shape> resized_shape(InferenceContext& ctx, const ResizeArgs& args, const Shape& in) {
  if (args.roi_input >= 0 && ctx.has_input(args.roi_input)) ctx.expect_dtype(args.roi_input, {DType::kF32, DType::kF64, DType::kF16});
  if (args.scales_input >= 0 && ctx.has_input(args.scales_input)) ctx.expect_dtype(args.scales_input, {DType::kF32});
  if (args.sizes_input >= 0 && ctx.has_input(args.sizes_input)) ctx.expect_dtype(args.sizes_input, {DType::kI64});
  bool unknown = false;
  const Tensor* roi = value_or_null(ctx, args.roi_input, unknown);
  if (args.coordinates != ResizeCoordinates::kTfCropAndResize) roi = nullptr, unknown = false;
  const Tensor* scales = value_or_null(ctx, args.scales_input, unknown);
  const Tensor* sizes = value_or_null(ctx, args.sizes_input, unknown);
  if (unknown) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : in.dims) dims.push_back(d.is_static() ? d.value : -1);
  const auto axes = resize_axes(ctx.node().describe(), args, dims, roi, scales, sizes);
  std::vector<Dim> out = in.dims;
  for (size_t d = 0; d < out.size(); ++d)
    if (axes[d].resized) out[d] = axes[d].out >= 0 ? Dim(axes[d].out) : Dim();
  return Shape(std::move(out));
}

void infer_resize(InferenceContext& ctx) {
  const ResizeArgs args = resize_args(ctx.node());
  const Shape& in = ctx.input_shape(0);
  if (!in.rank_known) return ctx.set_output(0, ctx.input_dtype(0), Shape::unknown_rank());
  if (args.mode != ResizeMode::kNearest)
    ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kF16, DType::kBF16});
  auto out = resized_shape(ctx, args, in);
  ctx.set_output(0, ctx.input_dtype(0), out ? std::move(*out) : dynamic_shape(in.rank()));
}

void infer_resize_grad(InferenceContext& ctx) {
  resize_args(ctx.node());
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kF16, DType::kBF16});
  ctx.expect_dtype(1, {DType::kI64});
  ctx.set_output(0, ctx.input_dtype(0), shape_of_dims_input(ctx, 1));
}

}  // namespace

void register_resize_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "Resize", .min_inputs = 1, .max_inputs = 4, .infer = infer_resize});
  r.add({.domain = "", .name = "Upsample", .min_inputs = 1, .max_inputs = 2, .infer = infer_resize});
  r.add({.domain = std::string(kTrainrtDomain), .name = "ResizeGrad", .min_inputs = 2, .max_inputs = 5,
         .infer = infer_resize_grad});
}

}  // namespace trainrt
