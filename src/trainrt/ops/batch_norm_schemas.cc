// Schemas of BatchNormalization (ONNX opset 15 semantics) and its TrainRT-domain gradient op
// (autodiff/normalization_gradients.cc emits it):
//   BatchNormalization(X, scale, B, input_mean, input_var) -> (Y, [running_mean], [running_var])
//     X (N, C, d1, ..., dk) with k >= 0, the others (C); Y X's shape; the running stats (C),
//     produced only in training mode (training_mode=1). Y may be written over X: the kernel takes
//     all the statistics before it writes Y, element by element.
//   BatchNormalizationGrad(dY, X, scale, [mean, inv_std]) -> (dX, [dScale], [dBias])
//     dX X's shape, dScale and dBias (C); attributes epsilon and training_mode as on the forward.
//     dX may be written over dY: the kernel reads a channel's dY for its sums before writing its dX,
//     element by element (the ResNet stem's backward then needs no second (N, C, H, W) buffer).
//   InstanceNormalization(X, scale, B) -> Y: each (n, c) plane of X (N, C, d1, ..., dk), k >= 1,
//     normalized by its own mean and biased variance, then scaled and shifted per channel (C).
//   InstanceNormalizationGrad(dY, X, scale) -> (dX, [dScale], [dB]), attribute epsilon as on the
//     forward (the plane statistics are recomputed from X).
// All tensors share X's dtype (ONNX allows other types for scale and the stats; TrainRT does not).
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// The channel count of X, when static (-1 otherwise); fails unless X is (N, C, ...).
int64_t channels(InferenceContext& ctx, int x_input) {
  const Shape& x = ctx.input_shape(x_input);
  if (!x.rank_known) return -1;
  if (x.rank() < 2) ctx.fail(fmt("input ", x_input, " has shape ", to_string(x), ", expected (N, C, d1, ..., dk)"));
  return x.dims[1].is_static() ? x.dims[1].value : -1;
}

// Inputs [first, last] must be (C) vectors of input x_input's dtype.
void expect_per_channel(InferenceContext& ctx, int x_input, int first, int last, const char* names[]) {
  const int64_t c = channels(ctx, x_input);
  for (int i = first; i <= last; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input_dtype(i) != ctx.input_dtype(x_input))
      ctx.fail(fmt("input ", i, " (", names[i - first], ") has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                   dtype_name(ctx.input_dtype(x_input)), " like input ", x_input));
    const Shape& s = ctx.input_shape(i);
    if (s.rank_known && (s.rank() != 1 || (c >= 0 && s.dims[0].is_static() && s.dims[0].value != c)))
      ctx.fail(fmt("input ", i, " (", names[i - first], ") has shape ", to_string(s), ", expected (C) for input ",
                   x_input, " of shape ", to_string(ctx.input_shape(x_input))));
  }
}

Shape channel_shape(InferenceContext& ctx, int x_input) {
  const int64_t c = channels(ctx, x_input);
  return Shape(std::vector<Dim>{c >= 0 ? Dim(c) : ctx.input_shape(x_input).rank_known
                                                      ? ctx.input_shape(x_input).dims[1]
                                                      : Dim()});
}

void infer_batch_norm(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  const char* names[] = {"scale", "B", "input_mean", "input_var"};
  expect_per_channel(ctx, 0, 1, 4, names);
  const bool training = ctx.node().attr_int("training_mode", 0) != 0;
  if (!training && (ctx.has_output(1) || ctx.has_output(2)))
    ctx.fail("outputs running_mean and running_var exist only in training mode (training_mode=1)");
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, ctx.input_shape(0));
  ctx.set_output(1, t, channel_shape(ctx, 0));
  ctx.set_output(2, t, channel_shape(ctx, 0));
}

void infer_batch_norm_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  if (ctx.input_dtype(1) != ctx.input_dtype(0))
    ctx.fail(fmt("input 1 (X) has dtype ", dtype_name(ctx.input_dtype(1)), ", expected ",
                 dtype_name(ctx.input_dtype(0)), " like input 0"));
  const char* names[] = {"scale", "mean", "inv_std"};
  expect_per_channel(ctx, 1, 2, 4, names);
  if (ctx.has_input(3) != ctx.has_input(4)) ctx.fail("inputs 3 (mean) and 4 (inv_std) must be given together");
  if (ctx.node().attr_int("training_mode", 0) == 0 && !ctx.has_input(3))
    ctx.fail("inputs 3 (mean) and 4 (inv_std) are required in eval mode (training_mode=0)");
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, ctx.input_shape(1));
  ctx.set_output(1, t, channel_shape(ctx, 1));
  ctx.set_output(2, t, channel_shape(ctx, 1));
}

void infer_instance_norm(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  const Shape& x = ctx.input_shape(0);
  if (x.rank_known && x.rank() < 3)
    ctx.fail(fmt("input 0 has shape ", to_string(x), ", expected (N, C, d1, ..., dk) with k >= 1"));
  const char* names[] = {"scale", "B"};
  expect_per_channel(ctx, 0, 1, 2, names);
  ctx.set_output(0, ctx.input_dtype(0), x);
}

void infer_instance_norm_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64});
  if (ctx.input_dtype(1) != ctx.input_dtype(0))
    ctx.fail(fmt("input 1 (X) has dtype ", dtype_name(ctx.input_dtype(1)), ", expected ",
                 dtype_name(ctx.input_dtype(0)), " like input 0"));
  const char* names[] = {"scale"};
  expect_per_channel(ctx, 1, 2, 2, names);
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, ctx.input_shape(1));
  ctx.set_output(1, t, channel_shape(ctx, 1));
  ctx.set_output(2, t, channel_shape(ctx, 1));
}

}  // namespace

void register_batch_norm_schemas(OpRegistry& r) {
  r.add({.name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3, .infer = infer_instance_norm});
  r.add({.domain = std::string(kTrainrtDomain), .name = "InstanceNormalizationGrad", .min_inputs = 3,
         .max_inputs = 3, .min_outputs = 1, .max_outputs = 3, .infer = infer_instance_norm_grad});
  r.add({.name = "BatchNormalization", .min_inputs = 5, .max_inputs = 5, .min_outputs = 1, .max_outputs = 3,
         .infer = infer_batch_norm, .inplace = {{0, 0}}});
  r.add({.domain = std::string(kTrainrtDomain), .name = "BatchNormalizationGrad", .min_inputs = 3, .max_inputs = 5,
         .min_outputs = 1, .max_outputs = 3, .infer = infer_batch_norm_grad, .inplace = {{0, 0}}});
}

}  // namespace trainrt
