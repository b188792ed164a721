// A classification loss's gradient through the model's head, made in the forward for a loss
// gradient of one and scaled in the backward (rule 7 of plan/saved_values.h).
//
// A language model's largest saved value is its loss's log-probabilities, (tokens, vocabulary):
// 32 of gpt2-mini's 81 MiB; at a 128K vocabulary and 8K tokens, 4 GiB. What the backward does with
// them is linear in the loss's scalar output gradient dL:
//   dScores = SoftmaxCrossEntropyLossGrad(dL, log_prob, labels)        (tokens, vocab)
//   dh = dScores W,  dW = dScores^T h,  db = ReduceSum(dScores)          (tokens, hidden), (vocab, hidden)
// so the forward runs that chain with dL = 1 and the backward multiplies each result by dL. Saved:
// dh (tokens, hidden) instead of log_prob (tokens, vocab); dW and db are parameters' gradients,
// which the backward held to its end anyway, so they only start life before it. No FLOP is added:
// the chain's products move from the backward into the forward.
//
// The chain (what is linear in dScores): views, Cast, products and reductions whose other operands
// are forward values, Mul/Div by a forward value. It ends at the values something else reads (the
// boundaries: dh, the weight's gradient). At most one gradient Sum may join it: logits returned
// beside the loss get an output gradient of their own, Sum(dLogits_out, dScores), and the products
// after that Sum then run twice, the loss's part in the forward and the output's part in the
// backward, summed at each boundary: boundary = dL * forward part + backward part. Autograd gives no
// gradient for logits the caller does not use, and ZeroInputElimination then drops the backward part.
//
// Bits: with dL = 1 (loss.backward()) the same; otherwise each boundary rounds once more (the scale
// after the products rather than before). A boundary in bf16 (autocast) is scaled in f32 and rounded
// back, never by a rounded dL.
//
// It fires where the saved bytes shrink: the activations only the chain read (log_prob; h when no
// backward part reads it) against the boundaries that are no parameter's gradient, compared at
// several sizes of each dynamic dim (1, 16, 1024), all of which must agree: the token count cancels
// on both sides, so in practice it fires when the vocabulary is larger than the hidden size.
//
//   int moved = make_loss_gradients_in_forward(joint, gradients);  // appends to forward_nodes
#pragma once

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// Rewrites every SoftmaxCrossEntropyLossGrad chain of `joint` where it pays; returns how many.
// The forward copies are appended to gradients.forward_nodes (they read forward values only).
int make_loss_gradients_in_forward(Graph& joint, GradientResult& gradients);

}  // namespace trainrt
