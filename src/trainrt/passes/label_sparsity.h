// Label sparsity (ORTModule's sparse label compute optimizer), two rewrites:
//
// LabelSparsity, on the forward graph before autodiff: a SoftmaxCrossEntropyLoss or
// NegativeLogLikelihoodLoss with `ignore_index` and a scalar reduction (mean, sum) over scores
// (N, C) and labels (N) gets the rows whose label counts, ValidRows (ops/valid_rows.h), gathered
// once. The gather moves up through every row-wise op its value alone feeds (reshapes that keep
// the last dim, elementwise ops with a per-feature operand, LayerNormalization and Softmax over
// the last axis, products with a weight on the right: the LM head, its bias, the prediction-head
// transform), so those run on the R valid rows and the autodiff gives their gradients on R rows:
//
//   h (B, S, H) -> FusedMatMul(W, bias) -> Reshape (N, V) -> SCE(labels)                before
//   h -> Flatten (N, H) -> Gather(ValidRows(labels)) (R, H) -> FusedMatMul(W, bias) (R, V)
//     -> SCE(Gather(labels, rows))                                                       after
//
// A value something else reads too (the logits, a model output) stops the move: its rows are
// gathered there, it is still computed whole for its other readers, and the loss, softmax and
// their gradients run on R rows. The loss equals the full one (the padding rows are ignored rows).
//
// RowScatterPushdown, on a backward graph: the gradient of such a gather is a scatter of R rows
// into N zeros (GatherGrad); its products and row sums then read mostly zeros. When nothing but
// them reads it (the absent logits gradient gone: passes/zero_input_elimination.h), they run on
// the R rows instead:
//   dX = scatter(dV) W           ->  scatter(dV W)           (FusedMatMul, with its transB)
//   dW = scatter(dV)^T H         ->  dV^T Gather(H, rows)    (Gemm / FusedMatMul, transA = 1)
//   db = ReduceSumToShape(scatter(dV), (C))  ->  ReduceSumToShape(dV, (C))
// A Cast of the scatter (under autocast, the f32 gradient cast for the bf16 products below) casts
// the R rows instead, Cast(scatter(dV)) = scatter(Cast(dV)), so its readers are pushed too.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class LabelSparsity : public Pass {
 public:
  std::string_view name() const override { return "LabelSparsity"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

// Whether `rows` is a label-sparsity row selection: a ValidRows output, or the forward input or
// saved value it became once hoisted (train/row_selection_prologue.h) or partitioned.
bool is_valid_rows(const Value* rows);

class RowScatterPushdown : public Pass {
 public:
  std::string_view name() const override { return "RowScatterPushdown"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
