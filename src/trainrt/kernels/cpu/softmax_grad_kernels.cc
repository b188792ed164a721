// CPU kernels of SoftmaxGrad and LogSoftmaxGrad (TrainRT domain): the backward of Softmax and
// LogSoftmax along one axis (opset-13 semantics; the gradient rule flattens an older node's
// input to 2-D first).
//
//   SoftmaxGrad(dY, Y):     dX = Y * (dY - sum_axis(dY * Y))
//   LogSoftmaxGrad(dY, Y):  dX = dY - exp(Y) * sum_axis(dY)
// (PyTorch _softmax_backward_data / _log_softmax_backward_data; ONNX Runtime SoftmaxGrad.)
// dY, Y, dX: (outer, axis, inner). Along the innermost axis each row (in cache) takes two
// vectorized passes; along another axis tiles of (axis, columns) are folded into per-column sums
// and then written, whole rows at a time. f32, f64, and f16 / bf16 computed in float (staged rows,
// reduce_util.h) with dX rounded once, as torch's CPU kernels do for bf16.
#include <algorithm>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/reduce_grad_math.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/reduction_grad_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

constexpr int64_t kMaxColumns = 2048;
// f16/bf16 rows of a column block are staged in groups of about this many elements.
constexpr int64_t kStagedElements = int64_t{1} << 16;

// dX rows from the per-column sums s over the (rows, n) block at dy, y, dx (rows `stride` apart),
// f16/bf16 staged through float a few rows at a time (reduce_util.h).
template <typename T>
void softmax_grad_cols_block(bool log, const T* dy, const T* y, T* dx, const compute_t<T>* s, int64_t reduce,
                             int64_t stride, int64_t n, int64_t step) {
  for (int64_t r = 0; r < reduce; r += step) {
    const int64_t rows = std::min(step, reduce - r), off = r * stride;
    const Staged<T> gy = stage_in(dy + off, rows, n, stride, 0), yy = stage_in(y + off, rows, n, stride, 1);
    const Staged<T> gx = stage_out(dx + off, rows, n, stride, 2);
    for (int64_t i = 0; i < rows; ++i) {
      if (log) log_softmax_grad_cols(gy.data + i * gy.stride, yy.data + i * yy.stride, gx.data + i * gx.stride, s, n);
      else softmax_grad_cols(gy.data + i * gy.stride, yy.data + i * yy.stride, gx.data + i * gx.stride, s, n);
    }
    commit(gx, dx + off, rows, n, stride);
  }
}

// dy, y, dx: (outer, reduce, inner) of T; f16 and bf16 compute in float and round dX once.
template <typename T>
void softmax_grad_along(bool log, const T* dy, const T* y, T* dx, ReduceGeometry g, ThreadPool& pool) {
  using C = compute_t<T>;
  const int64_t reduce = g.reduce, inner = g.inner;
  if (inner == 1) {
    pool.parallel_for(g.outer, rows_per_task(reduce), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const int64_t off = o * reduce;
        const Staged<T> gy = stage_in(dy + off, 1, reduce, reduce, 0), yy = stage_in(y + off, 1, reduce, reduce, 1);
        const Staged<T> gx = stage_out(dx + off, 1, reduce, reduce, 2);
        if (log) log_softmax_grad_row(gy.data, yy.data, gx.data, row_sum(gy.data, reduce), reduce);
        else softmax_grad_row(gy.data, yy.data, gx.data, row_dot(gy.data, yy.data, reduce), reduce);
        commit(gx, dx + off, 1, reduce, reduce);
      }
    });
    return;
  }
  // Tiles of (outer index, up to kMaxColumns columns): the column sums stay in L1.
  const int64_t block = std::min(inner, kMaxColumns), blocks = (inner + block - 1) / block;
  const int64_t grain = std::max<int64_t>(1, kMinTaskElements / std::max<int64_t>(1, reduce * block));
  pool.parallel_for(g.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    C* s = scratch<C>(3, block);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks, j0 = (t % blocks) * block, n = std::min(block, inner - j0);
      const int64_t off = o * reduce * inner + j0;
      const int64_t step = kIsFloat16<T> ? std::max<int64_t>(1, kStagedElements / n) : std::max<int64_t>(reduce, 1);
      std::fill(s, s + n, C(0));
      for (int64_t r = 0; r < reduce; r += step) {
        const int64_t rows = std::min(step, reduce - r), at = off + r * inner;
        const Staged<T> gy = stage_in(dy + at, rows, n, inner, 0);
        if (log) {
          cols_add(s, gy.data, rows, gy.stride, n);
        } else {
          const Staged<T> yy = stage_in(y + at, rows, n, inner, 1);
          cols_add_prod(s, gy.data, yy.data, rows, gy.stride, n);
        }
      }
      softmax_grad_cols_block(log, dy + off, y + off, dx + off, s, reduce, inner, n, step);
    }
  });
}

template <typename T>
KernelFn make_softmax_grad(const Node& node) {
  const bool log = node.op_type() == "LogSoftmaxGrad";
  const int64_t axis_attr = node.attr_int("axis", -1);
  const std::string name = node.describe();
  return [log, axis_attr, name](KernelContext& ctx) {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    if (dy.dims() != y.dims())
      throw ShapeError(fmt(name, ": input 0 (dY) has shape ", to_string(dy.dims()), ", input 1 (Y) has shape ",
                           to_string(y.dims()), "; they must match"));
    if (axis_attr < -y.rank() || axis_attr >= y.rank())
      throw ShapeError(fmt(name, ": axis ", axis_attr, " is out of range for shape ", to_string(y.dims())));
    const ReduceGeometry g = axis_geometry(y.dims(), normalize_axis(axis_attr, y.rank()));
    softmax_grad_along<T>(log, dy.data<T>(), y.data<T>(), ctx.out(0).data<T>(), g, ctx.threads());
  };
}

}  // namespace

void register_softmax_grad_kernels(KernelTable& t) {
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    t.add(kTrainrtDomain, op, DType::kF32, make_softmax_grad<float>);
    t.add(kTrainrtDomain, op, DType::kF64, make_softmax_grad<double>);
    t.add(kTrainrtDomain, op, DType::kF16, make_softmax_grad<Half>);
    t.add(kTrainrtDomain, op, DType::kBF16, make_softmax_grad<BFloat16>);
  }
}

}  // namespace trainrt
