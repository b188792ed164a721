// ProductCastFusion: a bf16 product whose only reader widens it to f32 writes f32 itself, from the
// same f32 sums, unrounded (gemm_bf16_f32). Under autocast every weight gradient is such a pair:
// the bf16 product dW = dY^T X, then its Cast to the f32 parameter's gradient; the Cast was a pass
// reading and writing all of W (a third of the mlp's bf16 backward beside its products).
//
//   before:  P = Gemm | MatMul | FusedMatMul(A, B)      bf16 A and B, no bias, P (..., M, N) bf16
//            Y = Cast<f32>(P)
//   after:   Y = FusedMatMul(A, B, output_dtype = f32)  same transA, transB, alpha, in P's place
//
// Y then holds the product rounded once (to f32) where it was rounded twice (bf16, then exactly to
// f32): closer to the true product than eager autocast's, within bf16's rounding of it. It fires
// where P has no other reader and is no graph output. Run it on a backward program (the forward's
// bf16 products keep eager's bf16 values: its losses match autocast's).
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class ProductCastFusion final : public Pass {
 public:
  std::string_view name() const override { return "ProductCastFusion"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
