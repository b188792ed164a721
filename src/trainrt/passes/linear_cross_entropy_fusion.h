// LinearCrossEntropyFusion: a forward program that makes its loss's gradient through the head
// (saved-values rule 7, plan/loss_gradient_in_forward.h) runs the head's product, the loss and
// that gradient as one LinearSoftmaxCrossEntropy node (ops/linear_cross_entropy_schema.cc), which
// holds a block of rows of scores at a time instead of all N: a language model's (tokens, vocabulary)
// scores and their gradient never exist whole.
//
//   before:  S  = product(X, W [, B])                          (N, C): MatMul, FusedMatMul or Gemm, f32, 2-D
//            (loss, log_prob) = SoftmaxCrossEntropyLoss(S, labels)          mean or sum, no class weights
//            dS = SoftmaxCrossEntropyLossGrad(1, log_prob, labels)          dLoss the constant 1
//            dX = dS W (or dS W^T),  dW = dS^T X (or X^T dS),  [dB = ReduceSum(dS, axis 0)]
//   after:   (loss, dX, dW, [dB], block) = LinearSoftmaxCrossEntropy(X, W, labels, [B])
//            block: the (R, C) scores the kernel works in, read by nothing: the plan places it in
//            the arena for that one step, which at the forward's end is mostly idle
//
// Under autocast (bf16 X and W) the same chain carries two Casts, which go too:
//            S = Cast<f32>(product(X, W [, B]))  ...  dS = Cast<bf16>(SoftmaxCrossEntropyLossGrad(...))
//   after:   the same node on bf16 X and W: its dX, dW, dB are bf16 (the products' types) and its
//            output 4 is a 1-D f32 workspace (scores, their bf16 gradient, W's f32 sum over blocks)
// The bf16 form needs W's dims static (the workspace holds an f32 copy of it).
//
// It fires only where S, log_prob and dS have no reader but these nodes and are no graph output,
// and each reader of dS is one of the three products (dX and dW may each be absent). Run it on a
// forward program after partition_joint_graph.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class LinearCrossEntropyFusion final : public Pass {
 public:
  std::string_view name() const override { return "LinearCrossEntropyFusion"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
