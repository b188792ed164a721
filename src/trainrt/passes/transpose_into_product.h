// TransposeIntoProduct: a Transpose that swaps the last two axes of a product's operand becomes the
// product's transpose flag, so the operand is read in place instead of copied.
//
// Attention spells the keys' transpose out: scores = MatMul(q, Transpose(k, perm (0, 1, 3, 2))),
// a copy of k per layer in the forward, again wherever the backward recomputes it, and its
// gradient's Transpose back in the backward. The products read a transposed operand as it is
// (oneDNN strides), so:
//
//   before:  kt = Transpose(k, perm (..., r-1, r-2));  y = MatMul(q, kt)
//   after:   y = FusedMatMul(q, k, transB = 1)            (TrainRT domain; same node name, same place)
//
// Also for operand A (transA), for a FusedMatMul (its flag flips; a bias stays) and for a Gemm
// (2-D, perm (1, 0)). A Transpose left with no reader goes. MatMul needs both operands of rank 2 or
// more (a 1-D operand's MatMul is not a FusedMatMul) and a floating type (FusedMatMul's). Run it before autodiff: FusedMatMul's and
// Gemm's gradient rules give the operands their gradients with the flags, no Transpose.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class TransposeIntoProduct final : public Pass {
 public:
  std::string_view name() const override { return "TransposeIntoProduct"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
