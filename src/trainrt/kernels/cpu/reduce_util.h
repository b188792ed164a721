// Shared plumbing of the reduction family's CPU kernels (Reduce*, Softmax, LogSoftmax,
// LayerNormalization, SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).
//
// Every kernel of the family sees its input as (outer, reduce, inner): `reduce` is the extent
// it folds, `inner` the contiguous run after it. inner == 1 is the fast path (contiguous rows);
// inner > 1 folds whole rows of a (reduce, inner) slab at a time so memory streams in order.
// f16 and bf16 compute in float: rows or column blocks are staged through thread-local float
// buffers (stage_in / stage_out / commit), never the whole tensor. f64 computes in double.
//
//   ReduceGeometry g = axis_geometry(x.dims(), 1);   // x: (2, 5, 3) -> outer 2, reduce 5, inner 3
//   // Row o of a bf16 (outer, reduce) tensor as floats (the tensor's own memory for f32):
//   Staged<BFloat16> row = stage_in(x + o * g.reduce, /*rows=*/1, g.reduce, g.reduce, /*slot=*/0);
//   float m = row_max(row.data, g.reduce);
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "trainrt/core/dtype.h"
#include "trainrt/core/dtype_convert.h"  // convert_to_f32 / convert_from_f32: the staging
#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_pool.h"

namespace trainrt {

class KernelTable;

// The family's files register their kernels through these (register_reduction_kernels calls all).
void register_softmax_kernels(KernelTable& t);
void register_layer_norm_kernels(KernelTable& t);
void register_loss_kernels(KernelTable& t);
void register_linear_cross_entropy_kernels(KernelTable& t);  // LinearSoftmaxCrossEntropy

struct ReduceGeometry {
  int64_t outer = 1;
  int64_t reduce = 1;
  int64_t inner = 1;
};

// (outer, reduce, inner) for reducing the axes in `mask`, when they form one contiguous group
// once axes of extent 1 are ignored; nullopt when they do not (then move_reduced_axes_last).
std::optional<ReduceGeometry> reduce_geometry(const std::vector<int64_t>& dims, const std::vector<bool>& mask);
// (prod dims[:axis], dims[axis], prod dims[axis+1:]).
ReduceGeometry axis_geometry(const std::vector<int64_t>& dims, int64_t axis);
// A copy of x with the kept axes first and the reduced axes last, each in their order: the
// reduction of it is (kept elements, reduced elements, 1).
Tensor move_reduced_axes_last(const Tensor& x, const std::vector<bool>& mask);

// Enough elements per parallel task to pay for waking a worker (tens of microseconds of work).
inline constexpr int64_t kMinTaskElements = 32768;
// Rows of `row_elements` each per task: the `grain` of ThreadPool::parallel_for.
inline int64_t rows_per_task(int64_t row_elements) {
  return row_elements >= kMinTaskElements ? 1 : kMinTaskElements / (row_elements > 0 ? row_elements : 1);
}

// ---- Element types ----

// The type a storage type computes in: double for double, float for float, f16 and bf16.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
inline constexpr bool kIsFloat16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
inline compute_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, Half>) return f16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>) return bf16_to_f32(v.bits);
  else return v;
}
template <typename T>
inline T from_compute(compute_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) return Half{f32_to_f16(v)};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{f32_to_bf16(v)};
  else return v;
}

// A thread-local scratch buffer of at least n elements; `slot` (0-3) tells apart buffers used at
// once. Valid until the same thread asks for the same slot again; it keeps its largest size for
// the thread's life, so steady-state runs do not allocate.
template <typename C>
C* scratch(int slot, int64_t n) {
  static thread_local std::vector<C> buffers[4];
  std::vector<C>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// Staging of (rows, cols) blocks whose rows lie `stride` elements apart. For float and double
// these hand back the tensor's own memory (read-only when it came from stage_in); for f16 and
// bf16 a float copy with stride cols.
template <typename T>
struct Staged {
  compute_t<T>* data;
  int64_t stride;
};
template <typename T>
Staged<T> stage_in(const T* src, int64_t rows, int64_t cols, int64_t stride, int slot) {
  if constexpr (kIsFloat16<T>) {
    float* buf = scratch<float>(slot, rows * cols);
    for (int64_t r = 0; r < rows; ++r) convert_to_f32(src + r * stride, buf + r * cols, cols);
    return {buf, cols};
  } else {
    return {const_cast<T*>(src), stride};
  }
}
// Where to compute an output block; `commit` then moves it into place.
template <typename T>
Staged<T> stage_out(T* dst, int64_t rows, int64_t cols, int64_t stride, int slot) {
  if constexpr (kIsFloat16<T>) return {scratch<float>(slot, rows * cols), cols};
  else return {dst, stride};
}
template <typename T>
void commit(const Staged<T>& block, T* dst, int64_t rows, int64_t cols, int64_t stride) {
  if constexpr (kIsFloat16<T>) {
    for (int64_t r = 0; r < rows; ++r) convert_from_f32(block.data + r * block.stride, dst + r * stride, cols);
  }
}

// ---- Reductions shared with the loss kernels ----

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// y[o, j] = op over r of x[o, r, j] for x: (outer, reduce, inner) of a float type, y: (outer,
// inner) of type Out: T itself, or double for a caller that wants the result unrounded (a
// float log-sum-exp of large logits loses the low bits of log(sum) to the max).
// Instantiated for T in {float, double, Half, BFloat16} with Out = T and Out = double.
template <typename T, typename Out>
void reduce_along(ReduceOp op, const T* x, Out* y, ReduceGeometry g, ThreadPool& pool);

}  // namespace trainrt
