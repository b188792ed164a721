// The schema of FusedMatMul (fused_matmul_schemas.h): type and shape inference with symbolic dims.
#include "trainrt/ops/fused_matmul_schemas.h"

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

void infer_fused_matmul(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kF32, DType::kF64, DType::kF16, DType::kBF16});
  const DType t = ctx.input_dtype(0);
  if (ctx.input_dtype(1) != t)
    ctx.fail(fmt("input 1 has dtype ", dtype_name(ctx.input_dtype(1)), " but input 0 has ", dtype_name(t)));
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  for (int i = 0; i < 2; ++i)
    if (ctx.input_shape(i).rank() < 2)
      ctx.fail(fmt("input ", i, " has shape ", to_string(ctx.input_shape(i)), "; FusedMatMul needs rank >= 2"));
  const bool trans_a = ctx.node().attr_int("transA", 0) != 0;
  const bool trans_b = ctx.node().attr_int("transB", 0) != 0;
  const size_t ra = a.dims.size(), rb = b.dims.size();
  const Dim& m = a.dims[trans_a ? ra - 1 : ra - 2];
  const Dim& k_a = a.dims[trans_a ? ra - 2 : ra - 1];
  const Dim& k_b = b.dims[trans_b ? rb - 1 : rb - 2];
  const Dim& n = b.dims[trans_b ? rb - 2 : rb - 1];
  if (k_a.is_static() && k_b.is_static() && k_a.value != k_b.value)
    ctx.fail(fmt("inner dims differ: input 0 ", to_string(a), (trans_a ? " (transposed)" : ""), " has K = ",
                 k_a.value, ", input 1 ", to_string(b), (trans_b ? " (transposed)" : ""), " has K = ", k_b.value));
  Shape out;
  try {
    out = broadcast_shapes(Shape(std::vector<Dim>(a.dims.begin(), a.dims.end() - 2)),
                           Shape(std::vector<Dim>(b.dims.begin(), b.dims.end() - 2)));
  } catch (const ShapeError&) {
    ctx.fail(fmt("batch dims of input 0 ", to_string(a), " and input 1 ", to_string(b), " do not broadcast"));
  }
  out.dims.push_back(m);
  out.dims.push_back(n);
  if (ctx.has_input(2)) {  // the bias (N), added to every row
    if (ctx.input_dtype(2) != t)
      ctx.fail(fmt("input 2 (bias) has dtype ", dtype_name(ctx.input_dtype(2)), " but input 0 has ", dtype_name(t)));
    const Shape& bias = ctx.input_shape(2);
    if (bias.rank_known && (bias.rank() != 1 || (bias.dims[0].is_static() && n.is_static() && bias.dims[0].value != n.value)))
      ctx.fail(fmt("input 2 (bias) has shape ", to_string(bias), ", expected (", to_string(n), ")"));
  }
  // output_dtype = 1 (f32) on bf16 operands: the f32 sums written unrounded (passes/product_cast_fusion.h).
  DType out_dtype = t;
  if (ctx.node().has_attr("output_dtype")) {
    const int64_t to = ctx.node().attr_int("output_dtype", 0);
    if (to != 1 || t != DType::kBF16 || ctx.has_input(2))
      ctx.fail(fmt("output_dtype ", to, ": only 1 (f32), on bf16 operands without bias"));
    out_dtype = DType::kF32;
  }
  ctx.set_output(0, out_dtype, std::move(out));
}

}  // namespace

void register_fused_matmul_schemas(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "FusedMatMul", .min_inputs = 2, .max_inputs = 3,
         .infer = infer_fused_matmul});
}

}  // namespace trainrt
