// The random ops (ONNX): RandomUniform, RandomNormal (dims from the `shape` attribute),
// RandomUniformLike, RandomNormalLike (dims of their input, whose values are not read) and
// Bernoulli (each element 1 with its input's probability, else 0). `dtype` (an ONNX type code)
// gives the output's type: float by default for RandomUniform / RandomNormal, the input's for the
// others. `seed` fixes the stream; without it every run draws anew (KernelContext::random_seed).
// Random, so never folded, deduplicated or recomputed (OpSchema::deterministic).
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

DType output_dtype(const InferenceContext& ctx, DType fallback) {
  const int64_t code = ctx.node().attr_int("dtype", 0);
  return code == 0 ? fallback : dtype_from_onnx(static_cast<int>(code));
}

void infer_random_of_shape(InferenceContext& ctx) {
  const std::vector<int64_t> dims = ctx.node().attr_ints("shape", {});
  if (!ctx.node().has_attr("shape")) ctx.fail("has no attribute 'shape'");
  for (int64_t d : dims)
    if (d < 0) ctx.fail(fmt("attribute 'shape' holds a negative dim (", d, ")"));
  const DType dtype = output_dtype(ctx, DType::kF32);
  if (!is_floating(dtype)) ctx.fail(fmt("dtype ", dtype_name(dtype), " is not a floating-point type"));
  ctx.set_output(0, dtype, Shape::of(dims));
}

void infer_random_like(InferenceContext& ctx) {
  const DType dtype = output_dtype(ctx, ctx.input_dtype(0));
  if (!is_floating(dtype)) ctx.fail(fmt("dtype ", dtype_name(dtype), " is not a floating-point type"));
  ctx.set_output(0, dtype, ctx.input_shape(0));
}

void infer_bernoulli(InferenceContext& ctx) {
  if (!is_floating(ctx.input_dtype(0))) ctx.fail("its probabilities must be floating-point");
  ctx.set_output(0, output_dtype(ctx, ctx.input_dtype(0)), ctx.input_shape(0));
}

}  // namespace

void register_random_schemas(OpRegistry& r) {
  for (const char* op : {"RandomUniform", "RandomNormal"})
    r.add({.name = op, .min_inputs = 0, .max_inputs = 0, .infer = infer_random_of_shape, .deterministic = false});
  for (const char* op : {"RandomUniformLike", "RandomNormalLike"})
    r.add({.name = op, .min_inputs = 1, .max_inputs = 1, .infer = infer_random_like, .deterministic = false});
  r.add({.name = "Bernoulli", .min_inputs = 1, .max_inputs = 1, .infer = infer_bernoulli, .deterministic = false});
}

}  // namespace trainrt
