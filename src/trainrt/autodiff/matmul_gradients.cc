// Gradient rules for MatMul and Gemm.
//
// MatMul (numpy semantics, batch dims broadcast): Y = A @ B with A (..., M, K), B (..., K, N).
//   dA = dY @ B^T and dB = A^T @ dY, each summed back over the batch dims it was broadcast along.
//   1-D operands are promoted as numpy does (A (K) -> (1, K), B (K) -> (K, 1)); the promoted axis
//   is added to dY and removed from the gradient again.
//   Plain 2-D products use Gemm's transpose flags instead of materializing transposes.
// Gemm: Y = alpha * op(A) @ op(B) + beta * C, op = optional transpose (ONNX Gemm spec).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"

namespace trainrt {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

// Swaps the last two axes of a value of known rank >= 2.
Value* transpose_last_two(GradContext& ctx, Value* v) {
  int64_t rank = v->shape.rank();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(rank - 1)], perm[static_cast<size_t>(rank - 2)]);
  return ctx.emit("Transpose", {v}, {{"perm", ints(perm)}});
}

Value* gemm(GradContext& ctx, Value* a, Value* b, bool trans_a, bool trans_b, float alpha) {
  return ctx.emit("Gemm", {a, b},
                  {{"transA", Attribute::of_int(trans_a)}, {"transB", Attribute::of_int(trans_b)},
                   {"alpha", Attribute::of_float(alpha)}});
}

void matmul_grad(GradContext& ctx) {
  Value* a = ctx.input(0);
  Value* b = ctx.input(1);
  Value* dy = ctx.output_grad(0);
  if (!a->shape.rank_known || !b->shape.rank_known)
    throw UnsupportedOp(fmt(ctx.node().describe(), ": MatMul gradient needs operands of known rank"));
  if (a->shape.rank() == 2 && b->shape.rank() == 2) {
    if (ctx.needs_input_grad(0)) ctx.set_input_grad(0, gemm(ctx, dy, b, false, true, 1.f));
    if (ctx.needs_input_grad(1)) ctx.set_input_grad(1, gemm(ctx, a, dy, true, false, 1.f));
    return;
  }
  // Promote 1-D operands so both are at least 2-D, and give dY the promoted axes.
  Value* a2 = a;
  Value* b2 = b;
  if (a->shape.rank() == 1) {
    a2 = ctx.emit("Unsqueeze", {a, ctx.const_i64({0})});
    dy = ctx.emit("Unsqueeze", {dy, ctx.const_i64({-2})});
  }
  if (b->shape.rank() == 1) {
    b2 = ctx.emit("Unsqueeze", {b, ctx.const_i64({1})});
    dy = ctx.emit("Unsqueeze", {dy, ctx.const_i64({-1})});
  }
  auto back_to = [&](Value* grad, Value* promoted, Value* original) {
    Value* g = ctx.reduce_to_shape_of(grad, promoted);
    return promoted == original ? g : ctx.emit("Reshape", {g, ctx.shape_of(original)});
  };
  if (ctx.needs_input_grad(0))
    ctx.set_input_grad(0, back_to(ctx.emit("MatMul", {dy, transpose_last_two(ctx, b2)}), a2, a));
  if (ctx.needs_input_grad(1))
    ctx.set_input_grad(1, back_to(ctx.emit("MatMul", {transpose_last_two(ctx, a2), dy}), b2, b));
}

void gemm_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  bool ta = n.attr_int("transA", 0) != 0;
  bool tb = n.attr_int("transB", 0) != 0;
  float alpha = n.attr_float("alpha", 1.f);
  float beta = n.attr_float("beta", 1.f);
  Value* a = ctx.input(0);
  Value* b = ctx.input(1);
  Value* g = ctx.output_grad(0);
  if (ctx.needs_input_grad(0)) {
    Value* da = !ta ? gemm(ctx, g, b, false, !tb, alpha) : gemm(ctx, b, g, tb, true, alpha);
    ctx.set_input_grad(0, da);
  }
  if (ctx.needs_input_grad(1)) {
    Value* db = !tb ? gemm(ctx, a, g, !ta, false, alpha) : gemm(ctx, g, a, true, ta, alpha);
    ctx.set_input_grad(1, db);
  }
  if (ctx.needs_input_grad(2)) {
    Value* dc = ctx.reduce_to_shape_of(g, ctx.input(2));
    if (beta != 1.f) dc = ctx.emit("Mul", {dc, ctx.scalar_like(dc, beta)});
    ctx.set_input_grad(2, dc);
  }
}

}  // namespace

void register_matmul_gradients(GradientRegistry& r) {
  r.add("", "MatMul", matmul_grad);
  r.add("", "Gemm", gemm_grad);
}

}  // namespace trainrt
