// What the Conv and ConvGrad kernels share: the node's problem, worked out once per input shape,
// and their handling of degenerate shapes and unsupported dtypes. Both run in f32 and in bf16
// (mixed precision: bf16 operands, f32 sums; conv_primitives.h).
//
//   auto state = std::make_shared<ConvKernelState>(node);   // in the factory
//   const ConvProblem& p = state->problem(x, w, has_bias);   // in the kernel, every run
//   const ChunkedProblem& c = state->chunked(ctx.threads().num_threads());
#pragma once

#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"
#include "trainrt/kernels/cpu/conv_primitives.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

// The batch chunks of a problem (conv_primitives.h: batch_chunks) and their one or two problems.
struct ChunkedProblem {
  BatchChunks chunks;
  std::vector<ConvProblem> problems;  // chunk_problems: problems[0] for full chunks, back() for the last
  // The problem of a chunk of n images.
  const ConvProblem& of(int64_t n) const { return n == chunks.size ? problems.front() : problems.back(); }
};

// Holds the node (the plan outlives its kernels' use of it), its attributes parsed for the rank
// last seen, and the problem and batch chunks of the dims last seen: a steady-state run copies no
// problem (seven vectors each).
class ConvKernelState {
 public:
  explicit ConvKernelState(const Node& node);
  const std::string& node() const { return node_; }
  // The whole-batch problem for X and W in X's dtype (ShapeError naming the node when they do not
  // fit).
  const ConvProblem& problem(const Tensor& x, const Tensor& w, bool bias);
  // The last problem()'s batch chunks for a pool of `threads` threads.
  const ChunkedProblem& chunked(int threads);

 private:
  std::string node_;
  const Node* attrs_;
  ConvParams params_;
  int64_t params_rank_ = -1;
  ConvProblem problem_;
  bool valid_ = false;
  ChunkedProblem chunked_;
  int chunked_threads_ = 0;  // 0: chunked_ is not problem_'s
};

// Y (p.y) = B broadcast over the batch and spatial dims (0 without B, a null b): a convolution over
// no input channels or an empty kernel. B and Y in p.dtype.
void fill_with_bias(const ConvProblem& p, const Tensor* b, Tensor& y);

// The factory registered for f64, which oneDNN's convolutions do not take here: throws UnsupportedOp
// naming the node and the dtype. f16 has no kernel, so the session runs it in f32 between casts
// (runtime/bf16_widening.h).
KernelFn reject_unsupported_conv(const Node& node);

}  // namespace trainrt
