// Schemas of the matrix products: MatMul (numpy matmul semantics) and Gemm.
//
// ONNX spec sections "MatMul" (opset 13) and "Gemm" (opset 13). Both accept the float types and
// int32/int64 of TrainRT's dtype set, all inputs of one dtype.
#include <algorithm>

#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

void expect_same_matmul_dtypes(InferenceContext& ctx) {
  ctx.expect_dtype(0,
                   {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64});
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != ctx.input_dtype(0))
      ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), " but input 0 has ",
                   dtype_name(ctx.input_dtype(0))));
}

// MatMul: A (..., M, K) x B (..., K, N) -> (broadcast(...), M, N). As in numpy.matmul, a 1-D A is
// a row (1, K) and a 1-D B a column (K, 1), and that added dim is dropped from the result:
// (K) x (K) -> (), (K) x (B, K, N) -> (B, N), (B, M, K) x (K) -> (B, M).
void infer_matmul(InferenceContext& ctx) {
  expect_same_matmul_dtypes(ctx);
  DType dtype = ctx.input_dtype(0);
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, dtype, Shape::unknown_rank());
  if (a.rank() == 0 || b.rank() == 0)
    ctx.fail(fmt("input ", a.rank() == 0 ? 0 : 1, " is a scalar; MatMul needs rank >= 1 (shapes ",
                 to_string(a), " and ", to_string(b), ")"));
  const Dim& k_a = a.dims.back();
  const Dim& k_b = b.dims[static_cast<size_t>(std::max<int64_t>(b.rank() - 2, 0))];
  if (k_a.is_static() && k_b.is_static() && k_a.value != k_b.value)
    ctx.fail(fmt("inner dims differ: input 0 ", to_string(a), " has K = ", k_a.value, ", input 1 ",
                 to_string(b), " has K = ", k_b.value));
  Shape batch_a(std::vector<Dim>(a.dims.begin(), a.dims.end() - std::min<int64_t>(a.rank(), 2)));
  Shape batch_b(std::vector<Dim>(b.dims.begin(), b.dims.end() - std::min<int64_t>(b.rank(), 2)));
  Shape out;
  try {
    out = broadcast_shapes(batch_a, batch_b);
  } catch (const ShapeError&) {
    ctx.fail(fmt("batch dims of input 0 ", to_string(a), " and input 1 ", to_string(b),
                 " do not broadcast"));
  }
  if (a.rank() >= 2) out.dims.push_back(a.dims[static_cast<size_t>(a.rank() - 2)]);
  if (b.rank() >= 2) out.dims.push_back(b.dims.back());
  ctx.set_output(0, dtype, std::move(out));
}

// Gemm: Y (M, N) = alpha * A' B' + beta * C, A' = transA ? A^T : A (M, K), B' likewise (K, N),
// C optional and unidirectionally broadcastable to (M, N).
void infer_gemm(InferenceContext& ctx) {
  expect_same_matmul_dtypes(ctx);
  const Node& node = ctx.node();
  bool trans_a = node.attr_int("transA", 0) != 0;
  bool trans_b = node.attr_int("transB", 0) != 0;
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  for (int i = 0; i < 2; ++i) {
    const Shape& s = ctx.input_shape(i);
    if (s.rank_known && s.rank() != 2)
      ctx.fail(
          fmt("input ", i, " (", i == 0 ? "A" : "B", ") must be 2-D, got shape ", to_string(s)));
  }
  Dim m = a.rank_known ? a.dims[trans_a ? 1 : 0] : Dim();
  Dim k_a = a.rank_known ? a.dims[trans_a ? 0 : 1] : Dim();
  Dim k_b = b.rank_known ? b.dims[trans_b ? 1 : 0] : Dim();
  Dim n = b.rank_known ? b.dims[trans_b ? 0 : 1] : Dim();
  if (k_a.is_static() && k_b.is_static() && k_a.value != k_b.value)
    ctx.fail(fmt("inner dims differ: A ", to_string(a), (trans_a ? " (transposed)" : ""),
                 " has K = ", k_a.value, ", B ", to_string(b), (trans_b ? " (transposed)" : ""),
                 " has K = ", k_b.value));
  if (ctx.has_input(2) && ctx.input_shape(2).rank_known) {
    const Shape& c = ctx.input_shape(2);
    if (c.rank() > 2) ctx.fail(fmt("input 2 (C) must have rank <= 2, got shape ", to_string(c)));
    Dim* targets[2] = {&m, &n};
    for (int64_t i = 0; i < c.rank(); ++i) {
      const Dim& cd = c.dims[static_cast<size_t>(i)];
      Dim& target = *targets[2 - c.rank() + i];
      if (!cd.is_static() || cd.value == 1) continue;
      if (target.is_static() && target.value != cd.value)
        ctx.fail(fmt("input 2 (C) of shape ", to_string(c), " does not broadcast to the result (",
                     to_string(m), ", ", to_string(n), ")"));
      target = cd;  // a C dim other than 1 equals the result's
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape({m, n}));
}

}  // namespace

void register_matmul_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "MatMul", .min_inputs = 2, .max_inputs = 2, .infer = infer_matmul,
         .inplace = {}});
  r.add({.domain = "", .name = "Gemm", .min_inputs = 2, .max_inputs = 3, .infer = infer_gemm,
         .inplace = {}});
  register_einsum_schema(r);
}

}  // namespace trainrt
