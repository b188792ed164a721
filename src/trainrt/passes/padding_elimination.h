// PaddingElimination (ORTModule's embedding sparsity): the tokens the attention mask marks as
// padding leave the row-wise compute, on the forward graph before autodiff.
//
// The tokens are the rows of the embedding's ids (B, S): export's symbolic dims, which capture
// declares on every value (Value::declared), say which values are token-major: (B, S, ...) or
// their flattening (B*S, ...). From each embedding Gather of token ids, the region grows through
// every op that works on each token row alone (elementwise ops, norms and softmax over the
// feature axes, products with a weight, reshapes and splits of the feature axes), and there the
// values hold the R kept rows instead:
//
//   ids (B, S) -> Gather(wte) (B, S, H) -> LayerNorm -> Gemm (B*S, 3H) -> ... -> SDPA        before
//   rows = ValidRows(keep)                                   (R): the kept tokens, padded to 64
//   Gather(ids_flat, rows) -> Gather(wte) (R, H) -> LayerNorm -> Gemm (R, 3H)
//     -> GatherGrad(N, rows) -> Where(keep, ., 0) -> Reshape (B, S, 3H) -> ... -> SDPA       after
//
// keep = attention_mask != 0, or a label some loss counts. A value leaves the region (padded
// back: the kept rows scattered into zeros) where an op needs the sequence, and a value from
// outside enters it (gathered) where a row-wise op reads it (a position embedding, expanded to
// (B, S, H) first). A loss over token rows (SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss
// with ignore_index) reads the kept rows and their labels: it counts the same rows, so it equals
// eager's.
//
// It fires only where dropping the rows provably changes no loss, gradient or kept row: from where
// a value leaves, every op up to the next region entry or model output works position by position
// (elementwise, transposes and reshapes, ops whose axes are static feature dims), and the only
// op mixing positions is ScaledDotProductAttention with a mask computed from the attention mask,
// so that no kept query attends a dropped key. Every value outside the region is then eager's at
// the kept positions. Model outputs are eager's at kept positions; at dropped ones the token-major
// outputs (logits, hidden states) are zeros (as ORTModule's padding elimination documents) and the
// others (an attention cache's keys and values) hold unspecified values. A model the pass cannot
// prove this for is left as it is, and why is in `last_reason()`.
#pragma once

#include <string>

#include "trainrt/passes/pass.h"

namespace trainrt {

class PaddingElimination : public Pass {
 public:
  std::string_view name() const override { return "PaddingElimination"; }
  // Why the last apply changed nothing ("no attention mask among the inputs"), or the region's
  // size when it fired ("42 ops on the kept tokens").
  const std::string& last_reason() const { return reason_; }
  // Forward FLOPs one token row costs in the products the last apply moved (2 K N each, from their
  // weights' dims): what a dropped row saves, three times over with the backward's two products.
  int64_t row_flops() const { return row_flops_; }

 protected:
  bool apply_impl(Graph& graph) const override;

 private:
  mutable std::string reason_;
  mutable int64_t row_flops_ = 0;
};

}  // namespace trainrt
