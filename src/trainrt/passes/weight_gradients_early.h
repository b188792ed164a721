// WeightGradientsEarly: each weight gradient's product runs as soon as its operands exist.
//
// The gradient builder walks the forward backwards and, for a product Y = X W, emits the input's
// gradient dX = dY W^T before the weight's dW = X^T dY. When X is recomputed for dW alone (a
// Gelu output under level 0's cheap recompute, a LayerNorm output), dX (as large as X) and the
// recomputed X are then live together: gpt2-mini's backward arena peaks there, in its first steps
// (dX of the last MLP's output projection, 4 MiB, beside the recomputed Gelu output, 4 MiB).
// Eager autograd runs both from one node in either order. Here the product making a parameter
// gradient (a graph output of the backward), with the nodes that only feed it (the recompute),
// moves as a block to right after the last of its other operands is made: the recompute dies at
// dW, before dX is made, and dX takes its bytes.
//
//   dX = MatMul(dY, W^T); Xr = Gelu(A); dW = Gemm(Xr^T, dY)    ->    Xr = Gelu(A); dW = ...; dX = ...
//
// Only moves nodes earlier, within a topological order: every value is the same, bit for bit.
// Products only (Gemm, MatMul, FusedMatMul) whose every output is a graph output; a gradient
// summed from parts (GradientSumChain's running sum) keeps its place. A PythonOp never moves.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class WeightGradientsEarly : public Pass {
 public:
  std::string_view name() const override { return "WeightGradientsEarly"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
