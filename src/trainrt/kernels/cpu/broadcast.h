// Iteration over inputs broadcast to one output (ONNX multidirectional broadcasting), as runs of
// contiguous output elements. For elementwise kernels with two or more inputs.
//
// The output dims are collapsed: size-1 dims are dropped and adjacent dims merged wherever every
// input is contiguous across both or broadcast across both. What remains is a grid of rows of
// `inner()` output elements; along a row each input either advances one element per output
// element (inner stride 1) or repeats one value (inner stride 0). So:
//   same shapes               -> 1 row of numel, every input at stride 1
//   (B,T,C) + (C)             -> B*T rows of C, the bias at stride 1
//   (B,T,C) * (B,T,1)         -> B*T rows of C, the scale at stride 0 (one value per row)
//   (N,1) + (1,M)             -> N rows of M, a at stride 0, b at stride 1
//
//   BroadcastPlan plan({&a.dims(), &b.dims()}, y.dims());
//   plan.for_each_run(0, plan.numel(), [&](const int64_t* in_offsets, int64_t out_offset, int64_t len) {
//     // y[out_offset + i] = f(a[in_offsets[0] + i * plan.inner_stride(0)], b[...]), i < len
//   });
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace trainrt {

class BroadcastPlan {
 public:
  // Throws ShapeError naming the shapes when an input does not broadcast to out_dims.
  BroadcastPlan(const std::vector<const std::vector<int64_t>*>& inputs, const std::vector<int64_t>& out_dims);

  int num_inputs() const { return num_inputs_; }
  int64_t numel() const { return numel_; }
  int64_t inner() const { return inner_; }
  // 1 when input k advances along a row, 0 when it repeats one value.
  int64_t inner_stride(int k) const { return inner_strides_[static_cast<size_t>(k)]; }

  // Calls f(in_offsets, out_offset, len) for consecutive runs covering output elements
  // [begin, end): in_offsets[k] is input k's element offset at the run's first element, and the
  // run continues along a row for len elements. Runs never cross a row.
  template <typename F>
  void for_each_run(int64_t begin, int64_t end, F&& f) const;

 private:
  int num_inputs_ = 0;
  int64_t numel_ = 1;
  int64_t inner_ = 1;
  std::vector<int64_t> outer_dims_;     // collapsed dims above the rows, outermost first
  std::vector<int64_t> outer_strides_;  // [dim * num_inputs + k]: input k's step along dim
  std::vector<int64_t> inner_strides_;  // [k]: 0 or 1
};

template <typename F>
void BroadcastPlan::for_each_run(int64_t begin, int64_t end, F&& f) const {
  if (begin >= end) return;
  const size_t n = static_cast<size_t>(num_inputs_);
  const size_t rank = outer_dims_.size();
  // One buffer: the row index per outer dim, the row's input offsets, the run's input offsets.
  std::vector<int64_t> state(rank + 2 * n, 0);
  int64_t* index = state.data();
  int64_t* row_offset = index + rank;
  int64_t* run_offset = row_offset + n;
  int64_t row = begin / inner_;
  int64_t col = begin % inner_;
  for (size_t d = rank; d-- > 0;) {
    index[d] = row % outer_dims_[d];
    row /= outer_dims_[d];
    for (size_t k = 0; k < n; ++k) row_offset[k] += index[d] * outer_strides_[d * n + k];
  }
  while (begin < end) {
    const int64_t len = std::min(inner_ - col, end - begin);
    for (size_t k = 0; k < n; ++k) run_offset[k] = row_offset[k] + col * inner_strides_[k];
    f(static_cast<const int64_t*>(run_offset), begin, len);
    begin += len;
    col = 0;
    for (size_t d = rank; d-- > 0;) {  // next row: an odometer over the outer dims
      const int64_t* step = &outer_strides_[d * n];
      for (size_t k = 0; k < n; ++k) row_offset[k] += step[k];
      if (++index[d] < outer_dims_[d]) break;
      for (size_t k = 0; k < n; ++k) row_offset[k] -= outer_dims_[d] * step[k];
      index[d] = 0;
    }
  }
}

}  // namespace trainrt
