// DFT (ONNX opset 17 / 20) and DFTGrad (com.trainrt): dft_args.h gives the math.
//   Y (..., m, ..., 2 or 1): X's dims with the axis's replaced by m (dft_output_length) and the last
//   by dft_output_parts.
//   m is known when dft_length is a known value, or when it is absent and X's dim is (a symbolic
//   dim passes through when the transform is not onesided).
#include "trainrt/ops/dft_args.h"
#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

const Tensor* known_value(const InferenceContext& ctx, int input) {
  if (input < 0 || !ctx.has_input(input)) return nullptr;
  const Tensor* v = ctx.input_value(input);
  return v && v->defined() ? v : nullptr;
}

void expect_scalar(InferenceContext& ctx, int input, const char* what) {
  if (input < 0 || !ctx.has_input(input)) return;
  ctx.expect_dtype(input, {DType::kI64, DType::kI32});
  const Shape& s = ctx.input_shape(input);
  if (s.rank_known && s.rank() > 1) ctx.fail(fmt(what, " (input ", input, ") has shape ", to_string(s), ", expected a scalar"));
  const Tensor* v = known_value(ctx, input);
  if (v && v->numel() != 1) ctx.fail(fmt(what, " (input ", input, ") has ", v->numel(), " values, expected 1"));
}

void infer_dft(InferenceContext& ctx) {
  const Node& node = ctx.node();
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  const int length_input = dft_length_input(node), axis_input = dft_axis_input(node);
  expect_scalar(ctx, length_input, "dft_length");
  expect_scalar(ctx, axis_input, "axis");
  const Shape& x = ctx.input_shape(0);
  if (!x.rank_known) return ctx.set_output(0, ctx.input_dtype(0), Shape::unknown_rank());
  const int64_t rank = x.rank();
  if (rank >= 1 && x.dims[rank - 1].is_static() && x.dims[rank - 1].value != 1 && x.dims[rank - 1].value != 2)
    ctx.fail(fmt("input 0 has shape ", to_string(x), ": its last dim must be 1 (real) or 2 (real, imaginary)"));
  if (axis_input >= 0 && ctx.has_input(axis_input) && !known_value(ctx, axis_input)) {
    Shape y = x;  // the axis is known at run time only: every dim but the last may change
    for (Dim& d : y.dims) d = Dim();
    y.dims.back() = Dim(dft_output_parts({.inverse = node.attr_int("inverse", 0) != 0,
                                           .onesided = node.attr_int("onesided", 0) != 0}));
    return ctx.set_output(0, ctx.input_dtype(0), y);
  }
  const DftArgs a = dft_args(node, rank, known_value(ctx, axis_input));
  const Dim& rows = x.dims[a.axis];
  Dim n_fft = !is_inverse_real(a) ? rows : rows.is_static() ? Dim(dft_default_length(a, rows.value)) : Dim();
  if (length_input >= 0 && ctx.has_input(length_input)) {
    const Tensor* v = known_value(ctx, length_input);
    n_fft = v ? Dim(v->to_i64(0)) : Dim();
    if (v && v->to_i64(0) < 1) ctx.fail(fmt("dft_length is ", v->to_i64(0), ", expected at least 1"));
  }
  Shape y = x;
  const bool halved = a.onesided && !a.inverse;  // m = N / 2 + 1, else m = N (symbolic N passes through)
  y.dims[a.axis] = n_fft.is_static() ? Dim(dft_output_length(a, n_fft.value)) : halved ? Dim() : n_fft;
  y.dims.back() = Dim(dft_output_parts(a));
  ctx.set_output(0, ctx.input_dtype(0), y);
}

void infer_dft_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  ctx.expect_dtype(1, {DType::kI64});
  expect_scalar(ctx, 2, "dft_length");
  expect_scalar(ctx, 3, "axis");
  ctx.set_output(0, ctx.input_dtype(0), shape_of_dims_input(ctx, 1));
}

}  // namespace

void register_dft_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "DFT", .min_inputs = 1, .max_inputs = 3, .infer = infer_dft});
  r.add({.domain = std::string(kTrainrtDomain), .name = "DFTGrad", .min_inputs = 2, .max_inputs = 4,
         .infer = infer_dft_grad});
}

}  // namespace trainrt
