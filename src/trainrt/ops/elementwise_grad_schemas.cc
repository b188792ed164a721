// Schemas of the TrainRT-domain gradient ops of the elementwise family (the rules in
// autodiff/elementwise_gradients.cc and activation_gradients.cc emit them; CPU kernels in
// kernels/cpu/elementwise_grad_kernels.cc), and the registration of FusedMatMul
// (fused_matmul_schemas.h), which the MatMul gradient emits:
//   ReluGrad(dY, Y), SigmoidGrad(dY, Y), TanhGrad(dY, Y) -> dX
//   LeakyReluGrad(dY, Y) -> dX    attribute alpha; input 1 may also be X (see the kernel)
//   GeluGrad(dY, X) -> dX         attribute approximate: "none" (default) or "tanh"
// Every input and dX have one float dtype and one shape (no broadcasting: a gradient has its
// forward value's shape). dX may be written over dY.
#include "trainrt/ops/fused_matmul_schemas.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// The shape two equally shaped inputs share: the more static one; fails when static dims or
// ranks differ.
Shape same_shape(const InferenceContext& ctx, int a, int b) {
  const Shape& sa = ctx.input_shape(a);
  const Shape& sb = ctx.input_shape(b);
  if (!sa.rank_known) return sb;
  if (!sb.rank_known) return sa;
  bool match = sa.rank() == sb.rank();
  Shape out = sa;
  for (size_t i = 0; match && i < sa.dims.size(); ++i) {
    const Dim& da = sa.dims[i];
    const Dim& db = sb.dims[i];
    match = !(da.is_static() && db.is_static() && da.value != db.value);
    if (!da.is_static() && (db.is_static() || da.symbol.empty())) out.dims[i] = db;
  }
  if (!match)
    ctx.fail(fmt("inputs ", a, " and ", b, " have shapes ", to_string(sa), " and ", to_string(sb),
                 "; they must match"));
  return out;
}

// (dY, Y or X) -> dX: float dtypes, both inputs of one dtype and one shape.
void infer_activation_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kF16, DType::kBF16});
  if (ctx.input_dtype(1) != ctx.input_dtype(0))
    ctx.fail(fmt("input 1 has dtype ", dtype_name(ctx.input_dtype(1)), ", expected ",
                 dtype_name(ctx.input_dtype(0)), " like input 0 (dY)"));
  ctx.set_output(0, ctx.input_dtype(0), same_shape(ctx, 0, 1));
}

void infer_gelu_grad(InferenceContext& ctx) {
  const std::string approximate = ctx.node().attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    ctx.fail(fmt("attribute approximate is '", approximate, "', expected 'none' or 'tanh'"));
  infer_activation_grad(ctx);
}

}  // namespace

void register_elementwise_grad_schemas(OpRegistry& r) {
  const std::string trainrt(kTrainrtDomain);
  // dX[i] reads dY[i] and the saved Y[i] (or X[i]) only: dX may overwrite either, the saved one when
  // the backward donates it (PlanOptions::donated_inputs).
  for (const char* op : {"ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad"})
    r.add({.domain = trainrt, .name = op, .min_inputs = 2, .max_inputs = 2, .infer = infer_activation_grad,
           .inplace = {{0, 0}, {1, 0}}});
  r.add({.domain = trainrt, .name = "GeluGrad", .min_inputs = 2, .max_inputs = 2, .infer = infer_gelu_grad,
         .inplace = {{0, 0}, {1, 0}}});
  register_fused_matmul_schemas(r);
}

}  // namespace trainrt
