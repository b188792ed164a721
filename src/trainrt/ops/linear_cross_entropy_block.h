// How many rows of (rows, classes) f32 scores LinearSoftmaxCrossEntropy holds at a time: 4 MiB of
// them, within [128, 4096] (products of fewer rows run far below the GEMM's speed). The schema
// sizes the node's optional scores-block output by it (an arena buffer the plan places), the CPU
// kernel blocks its rows by it. On bf16 operands that output is a larger workspace (below).
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainrt {

inline int64_t linear_cross_entropy_block_rows(int64_t classes) {
  constexpr int64_t kBlockElements = int64_t{1} << 20;
  return std::clamp<int64_t>(kBlockElements / std::max<int64_t>(classes, 1), 128, 4096);
}

// The bf16 kernel's workspace, in f32 elements, laid out in this order: the block's f32 scores
// (R, C); their gradient rounded to bf16 (R, C), for the gradient products; with dW, W's f32 sum over
// the blocks (`w_elements`); with dB, the bias's (C). dW and dB are rounded to bf16 once, at the end.
struct LinearCrossEntropyWorkspace {
  int64_t scores = 0, grad_bf16 = 0, dw_sum = 0, db_sum = 0, total = 0;  // offsets and size, f32 elements
};

inline LinearCrossEntropyWorkspace linear_cross_entropy_bf16_workspace(int64_t classes, int64_t w_elements,
                                                                      bool dw, bool db) {
  const int64_t block = linear_cross_entropy_block_rows(classes) * classes;
  LinearCrossEntropyWorkspace s;
  s.grad_bf16 = block;
  s.dw_sum = s.grad_bf16 + (block + 1) / 2;  // two bf16 a float
  s.db_sum = s.dw_sum + (dw ? w_elements : 0);
  s.total = s.db_sum + (db ? classes : 0);
  return s;
}

}  // namespace trainrt
