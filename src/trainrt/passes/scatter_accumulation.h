// ScatterAccumulation: a gradient summed from a scatter (GatherGrad) and other contributions is
// accumulated by the scatter itself.
//
// A tied embedding's gradient is the LM head's weight gradient plus the embedding lookup's
// scatter-add: Sum(dW_head, GatherGrad(shape, ids, dY)). Run as written, the scatter fills a dense
// (vocab, dim) temporary with zeros and its rows, and the Sum reads both and writes a third; at
// GPT-2 small's 50257 x 768 that is two 147 MiB temporaries beside the gradient. Here the scatter
// adds its rows onto the other contributions instead (GatherGrad's addend, input 3), in place when
// the addend dies there (the executor's in-place outputs), so neither temporary exists.
//
//   dw = Sum(head_dw, GatherGrad(shape, ids, dy))      ->   dw = GatherGrad(shape, ids, dy, head_dw)
//   dw = Sum(a, b, GatherGrad(shape, ids, dy))         ->   dw = GatherGrad(shape, ids, dy, Sum(a, b))
//
// The result is the same bit for bit: the kernel sums each row's scattered slices first and adds
// the addend last, as the Sum would; a Sum is rewritten only when the scatter is its last operand
// or one of two (float addition commutes, it does not associate). The scatter must be read by
// the Sum alone, with the Sum's dtype and static dims. Scatters of label sparsity's and padding
// elimination's row selections (ValidRows indices) are left to RowScatterPushdown.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class ScatterAccumulation : public Pass {
 public:
  std::string_view name() const override { return "ScatterAccumulation"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
