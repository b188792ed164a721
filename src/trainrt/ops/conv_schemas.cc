// Schemas of the convolution family:
//   Conv(X, W, [B]) -> Y                   ONNX Conv (opset 11 and 22), 1-D, 2-D and 3-D
//   ConvGrad(dY, X, W) -> (dX, dW, dB)     TrainRT domain: Conv's backward (autodiff/conv_gradients.cc)
// Shapes follow conv_args.h; a symbolic batch dim N passes through to Y (and dX) unchanged.
#include "trainrt/ops/conv_args.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// A shape's dims with -1 for the dynamic ones (conv_output_dims' convention).
std::vector<int64_t> known_dims(const Shape& s) {
  std::vector<int64_t> d;
  for (const Dim& dim : s.dims) d.push_back(dim.is_static() ? dim.value : -1);
  return d;
}

void expect_same_dtype(const InferenceContext& ctx, int i, int like, const char* what) {
  if (ctx.input_dtype(i) != ctx.input_dtype(like))
    ctx.fail(fmt("input ", i, " (", what, ") has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                 dtype_name(ctx.input_dtype(like)), " like input ", like));
}

// Checks X (input x) and W (input w) and returns Y's shape; N keeps X's symbol.
Shape conv_output_shape(const InferenceContext& ctx, int x, int w) {
  const Shape& xs = ctx.input_shape(x);
  const Shape& ws = ctx.input_shape(w);
  if (!xs.rank_known && !ws.rank_known) return Shape::unknown_rank();
  const int64_t rank = xs.rank_known ? xs.rank() : ws.rank();
  if (rank < 3 || rank > 5)
    ctx.fail(fmt("input ", xs.rank_known ? x : w, " has shape ", to_string(xs.rank_known ? xs : ws),
                 ", expected rank 3, 4 or 5 (1-D, 2-D or 3-D convolution)"));
  const ConvParams p = conv_params(ctx.node(), rank - 2);
  const std::vector<int64_t> unknown(static_cast<size_t>(rank), -1);
  const std::vector<int64_t> y = conv_output_dims(ctx.node().describe(), p, xs.rank_known ? known_dims(xs) : unknown,
                                                  ws.rank_known ? known_dims(ws) : unknown);
  Shape out;
  for (int64_t d : y) out.dims.push_back(d >= 0 ? Dim(d) : Dim());
  if (xs.rank_known) out.dims[0] = xs.dims[0];
  if (ws.rank_known) out.dims[1] = ws.dims[0];
  return out;
}

// Conv: X (N, C, D...), W (M, C / group, K...), B (M) -> Y (N, M, O...).
void infer_conv(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
  expect_same_dtype(ctx, 1, 0, "W");
  Shape y = conv_output_shape(ctx, 0, 1);
  if (ctx.has_input(2)) {
    expect_same_dtype(ctx, 2, 0, "B");
    const Shape& b = ctx.input_shape(2);
    const bool m_static = y.rank_known && y.dims[1].is_static();
    if (b.rank_known && (b.rank() != 1 || (m_static && b.dims[0].is_static() && b.dims[0].value != y.dims[1].value)))
      ctx.fail(fmt("input 2 (B) has shape ", to_string(b), ", expected (M) = (", to_string(y.rank_known ? y.dims[1] : Dim()),
                   ") for input 1 of shape ", to_string(ctx.input_shape(1))));
  }
  ctx.set_output(0, ctx.input_dtype(0), std::move(y));
}

// ConvGrad(dY, X, W) -> dX (X's shape), dW (W's shape), dB (M); Conv's attributes. dY must have
// the shape Conv gives for X and W.
void infer_conv_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
  expect_same_dtype(ctx, 1, 0, "X");
  expect_same_dtype(ctx, 2, 0, "W");
  const Shape y = conv_output_shape(ctx, 1, 2);
  const Shape& dy = ctx.input_shape(0);
  if (dy.rank_known && y.rank_known) {
    bool match = dy.rank() == y.rank();
    for (size_t i = 0; match && i < y.dims.size(); ++i)
      match = !(dy.dims[i].is_static() && y.dims[i].is_static() && dy.dims[i].value != y.dims[i].value);
    if (!match)
      ctx.fail(fmt("input 0 (dY) has shape ", to_string(dy), ", but Conv of input 1 ", to_string(ctx.input_shape(1)),
                   " and input 2 ", to_string(ctx.input_shape(2)), " gives ", to_string(y)));
  }
  const DType t = ctx.input_dtype(0);
  const Shape& w = ctx.input_shape(2);
  ctx.set_output(0, t, ctx.input_shape(1));
  ctx.set_output(1, t, w);
  ctx.set_output(2, t, w.rank_known ? Shape({w.dims[0]}) : Shape({Dim()}));
}

}  // namespace

void register_conv_schemas(OpRegistry& r) {
  r.add({.name = "Conv", .min_inputs = 2, .max_inputs = 3, .infer = infer_conv});
  r.add({.domain = std::string(kTrainrtDomain), .name = "ConvGrad", .min_inputs = 3, .max_inputs = 3,
         .min_outputs = 1, .max_outputs = 3, .infer = infer_conv_grad});
}

}  // namespace trainrt
