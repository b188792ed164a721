// Gradient rules for MatMul and Gemm.
//
// MatMul (numpy semantics, batch dims broadcast): Y = A @ B with A (..., M, K), B (..., K, N).
//   dA = dY @ B^T and dB = A^T @ dY, each summed back over the batch dims it was broadcast along.
//   1-D operands are promoted as numpy does (A (K) -> (1, K), B (K) -> (K, 1)); the promoted axis
//   is added to dY and removed from the gradient again.
//   Plain 2-D products use Gemm's transpose flags; batched ones FusedMatMul's (TrainRT domain,
//   ops/fused_matmul_schemas.h), so no transpose is materialized. A batched A times a 2-D B (a
//   Linear layer on (B, T, C) inputs) gets dB = Flatten(A)^T @ Flatten(dY) as one Gemm over all
//   B * T rows instead of a batched product summed over the batch afterwards.
// Gemm: Y = alpha * op(A) @ op(B) + beta * C, op = optional transpose (ONNX Gemm spec).
// FusedMatMul (TrainRT; what capture emits for Linear on (B, T, C) inputs): Y = alpha op(A) @ op(B)
//   [+ bias (N)]; dBias = dY summed over every axis but the last;
//   the gradients are FusedMatMuls with the transposes arranged so nothing is materialized, and a
//   2-D B (a weight) gets its gradient from one Gemm over the flattened rows, as for MatMul.
// Einsum (ops/einsum_equation.h): dX_i = Einsum(dY, X_j for j != i) with X_i's labels as output,
//   those only X_i has (summed in the forward) added back by Unsqueeze + Expand to X_i's dims, and
//   an ellipsis dim X_i broadcast summed back (ReduceSumToShape). A label repeated within X_i (a
//   diagonal) has no rule: UnsupportedOp names the node.
#include <algorithm>

#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/einsum_equation.h"

namespace trainrt {
namespace {

Value* gemm(GradContext& ctx, Value* a, Value* b, bool trans_a, bool trans_b, float alpha) {
  return ctx.emit("Gemm", {a, b},
                  {{"transA", Attribute::of_int(trans_a)}, {"transB", Attribute::of_int(trans_b)},
                   {"alpha", Attribute::of_float(alpha)}});
}

Value* fused_matmul(GradContext& ctx, Value* a, Value* b, bool trans_a, bool trans_b, float alpha = 1.f) {
  return ctx.emit("FusedMatMul", {a, b},
                  {{"transA", Attribute::of_int(trans_a)}, {"transB", Attribute::of_int(trans_b)},
                   {"alpha", Attribute::of_float(alpha)}},
                  kTrainrtDomain);
}

// v (..., K) as a matrix (prod(...), K); symbolic batch dims stay symbolic.
Value* flatten_batch(GradContext& ctx, Value* v) {
  return ctx.emit("Flatten", {v}, {{"axis", Attribute::of_int(-1)}});
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
  // Promote 1-D operands so both are at least 2-D, and give dY the promoted axes (N's first:
  // (K) @ (K) gives a 0-d dY, which becomes (1) and then (1, 1)).
  Value* a2 = a;
  Value* b2 = b;
  if (b->shape.rank() == 1) {
    b2 = ctx.emit("Unsqueeze", {b, ctx.const_i64({1})});
    dy = ctx.emit("Unsqueeze", {dy, ctx.const_i64({-1})});
  }
  if (a->shape.rank() == 1) {
    a2 = ctx.emit("Unsqueeze", {a, ctx.const_i64({0})});
    dy = ctx.emit("Unsqueeze", {dy, ctx.const_i64({-2})});
  }
  auto back_to = [&](Value* grad, Value* promoted, Value* original) {
    Value* g = ctx.reduce_to_shape_of(grad, promoted);
    return promoted == original ? g : ctx.emit("Reshape", {g, ctx.shape_of(original)});
  };
  if (ctx.needs_input_grad(0))
    ctx.set_input_grad(0, back_to(fused_matmul(ctx, dy, b2, false, true), a2, a));
  if (ctx.needs_input_grad(1)) {
    Value* db = b2->shape.rank() == 2
                    ? gemm(ctx, flatten_batch(ctx, a2), flatten_batch(ctx, dy), true, false, 1.f)
                    : fused_matmul(ctx, a2, dy, true, false);
    ctx.set_input_grad(1, back_to(db, b2, b));
  }
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

// Y = alpha op(A) @ op(B) (both rank >= 2). With G = dY:
//   dA = alpha G op(B)^T  (A untransposed)    dA = alpha op(B) G^T  (transA: A is (.., K, M))
//   dB = alpha op(A)^T G  (B untransposed)    dB = alpha G^T op(A)  (transB: B is (.., N, K))
void fused_matmul_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const float alpha = n.attr_float("alpha", 1.f);
  Value* a = ctx.input(0);
  Value* b = ctx.input(1);
  Value* g = ctx.output_grad(0);
  if (ctx.needs_input_grad(0)) {
    Value* da = !ta ? fused_matmul(ctx, g, b, false, !tb, alpha) : fused_matmul(ctx, b, g, tb, true, alpha);
    ctx.set_input_grad(0, ctx.reduce_to_shape_of(da, a));
  }
  if (ctx.needs_input_grad(1)) {
    Value* db;
    if (b->shape.rank() == 2 && a->shape.rank() >= 2 && !ta) {  // a weight: one Gemm over all rows
      Value* a2 = a->shape.rank() > 2 ? flatten_batch(ctx, a) : a;
      Value* g2 = g->shape.rank() > 2 ? flatten_batch(ctx, g) : g;
      db = !tb ? gemm(ctx, a2, g2, true, false, alpha) : gemm(ctx, g2, a2, true, false, alpha);
    } else {
      db = !tb ? fused_matmul(ctx, a, g, !ta, false, alpha) : fused_matmul(ctx, g, a, true, ta, alpha);
    }
    ctx.set_input_grad(1, ctx.reduce_to_shape_of(db, b));
  }
  if (n.num_inputs() > 2 && n.input(2) && ctx.needs_input_grad(2))  // the bias (N): dY summed over all rows
    ctx.set_input_grad(2, ctx.reduce_to_shape_of(g, ctx.input(2)));
}


void einsum_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  std::vector<int64_t> ranks;
  for (Value* x : n.inputs()) {
    if (!x->shape.rank_known) throw UnsupportedOp(fmt(n.describe(), ": no gradient for an input of unknown rank"));
    ranks.push_back(x->shape.rank());
  }
  const EinsumEquation e = parse_einsum(n.describe(), n.attr_string("equation", ""), ranks);
  std::vector<int> all_dims;  // every ellipsis dim's label
  for (int l = 0; l < e.num_labels; ++l)
    if (e.ellipsis_label[static_cast<size_t>(l)]) all_dims.push_back(l);
  for (int i = 0; i < n.num_inputs(); ++i) {
    if (!ctx.needs_input_grad(i)) continue;
    const std::vector<int>& mine = e.operands[static_cast<size_t>(i)];
    std::vector<int> elsewhere(e.output);  // labels the gradient einsum's inputs have
    std::vector<Value*> inputs = {ctx.output_grad(0)};
    std::vector<std::vector<int>> terms = {e.output};
    for (int j = 0; j < n.num_inputs(); ++j) {
      if (j == i) continue;
      inputs.push_back(ctx.input(j));
      terms.push_back(e.operands[static_cast<size_t>(j)]);
      elsewhere.insert(elsewhere.end(), terms.back().begin(), terms.back().end());
    }
    // The gradient's labels: X_i's, its ellipsis run widened to every ellipsis dim (those X_i lacks
    // or broadcast are summed back below); a label only X_i has is put back by Unsqueeze + Expand.
    std::vector<int> kept;
    std::vector<int64_t> dropped_axes;
    bool broadcasts = false;
    int64_t position = 0;
    const int64_t own_dims = std::count_if(mine.begin(), mine.end(), [&](int l) { return e.ellipsis_label[static_cast<size_t>(l)]; });
    if (own_dims < static_cast<int64_t>(all_dims.size())) {
      // X_i broadcast over leading ellipsis dims: they lead the gradient too, to be summed away.
      if (own_dims > 0 && !e.ellipsis_label[static_cast<size_t>(mine.front())])
        throw UnsupportedOp(fmt(n.describe(), ": no gradient for input ", i, ", whose ellipsis is not its term's first "
                                "axes and covers fewer dims than another input's"));
      kept = all_dims;
      position = static_cast<int64_t>(all_dims.size());
      broadcasts = true;
    }
    for (size_t a = 0; a < mine.size(); ++a) {
      const int l = mine[a];
      if (std::count(mine.begin(), mine.end(), l) > 1)
        throw UnsupportedOp(fmt(n.describe(), ": no gradient for input ", i, ", whose equation term repeats a label "
                                "(a diagonal)"));
      if (e.ellipsis_label[static_cast<size_t>(l)]) {
        if (!broadcasts) {  // X_i's run, widened to every ellipsis dim (the same ones when it has them all)
          kept.insert(kept.end(), all_dims.begin(), all_dims.end());
          position += static_cast<int64_t>(all_dims.size());
        }
        broadcasts = true;
        continue;
      }
      if (std::find(elsewhere.begin(), elsewhere.end(), l) != elsewhere.end()) kept.push_back(l);
      else dropped_axes.push_back(position);
      ++position;
    }
    Value* g = ctx.emit("Einsum", inputs, {{"equation", Attribute::of_string(to_equation(e, terms, kept))}});
    Value* x = ctx.input(i);
    if (!dropped_axes.empty()) {
      g = ctx.emit("Unsqueeze", {g, ctx.const_i64(dropped_axes)});
      g = ctx.emit("Expand", {g, ctx.shape_of(x)});
    }
    ctx.set_input_grad(i, broadcasts ? ctx.reduce_to_shape_of(g, x) : g);
  }
}

}  // namespace

void register_matmul_gradients(GradientRegistry& r) {
  r.add("", "MatMul", matmul_grad);
  r.add("", "Gemm", gemm_grad);
  r.add(kTrainrtDomain, "FusedMatMul", fused_matmul_grad);
  r.add("", "Einsum", einsum_grad);
}

}  // namespace trainrt
