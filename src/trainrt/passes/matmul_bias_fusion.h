// MatMulBiasFusion: folds a bias Add into the FusedMatMul it follows (a Linear layer on (B, T, C)
// inputs, as capture emits it), so the product writes x @ W^T + b in one pass over Y instead of
// a product pass and an Add pass.
//
//   before:  Y = FusedMatMul(A, B)          A (..., M, K), B (N, K) with transB, Y (..., M, N)
//            Z = Add(Y, bias)               bias (N), either Add operand
//   after:   Z = FusedMatMul(A, B, bias)    same attributes, same node name
//
// It fires only when Y has no other reader and is no graph output (Y disappears), the bias is 1-D
// with the same dtype and its one dim provably equals Y's last dim (so the Add broadcasts nothing
// but the bias). Run it before autodiff: FusedMatMul's gradient rule gives the bias its gradient
// (dY summed over every axis but the last), as the Add's rule did.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class MatMulBiasFusion final : public Pass {
 public:
  std::string_view name() const override { return "MatMulBiasFusion"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
