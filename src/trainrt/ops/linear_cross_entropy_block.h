// How many rows of (rows, classes) f32 scores LinearSoftmaxCrossEntropy holds at a time: 4 MiB of
// them, within [128, 4096] (products of fewer rows run far below the GEMM's speed). The schema
// sizes the node's optional scores-block output by it (an arena buffer the plan places), the CPU
// kernel blocks its rows by it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainrt {

inline int64_t linear_cross_entropy_block_rows(int64_t classes) {
  constexpr int64_t kBlockElements = int64_t{1} << 20;
  return std::clamp<int64_t>(kBlockElements / std::max<int64_t>(classes, 1), 128, 4096);
}

}  // namespace trainrt
