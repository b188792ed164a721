// CPU kernels of Softmax and LogSoftmax (ONNX). From opset 13 they normalize along one axis
// (default -1); before opset 13 the input is coerced to 2-D at `axis` (default 1) and each row
// of the flattened trailing dims is normalized.
//
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
//   log_softmax(x)_i = x_i - m - log(sum_j exp(x_j - m)),   m = max_j x_j
// Subtracting the max keeps every exp in (0, 1], so nothing overflows; it cancels exactly.
// Along the innermost axis each row (in cache) takes three vectorized passes; along another axis
// the (axis, inner) slab streams through twice, whole rows at a time (see softmax_columns).
#include <cmath>
#include <limits>

#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

constexpr int64_t kMaxColumns = 2048;
// f16/bf16 rows of a column block are staged in groups of about this many elements.
constexpr int64_t kStagedElements = int64_t{1} << 16;

template <typename C>
void softmax_row(bool log, const C* x, C* y, int64_t n) {
  const C m = row_max(x, n);
  if (log) {
    shift(x, y, m, std::log(row_sum_exp(x, n, m)), n);
  } else {
    const C sum = exp_shift_sum(x, y, m, n);
    scale(y, y, C(1) / sum, n);
  }
}

// Softmax along the rows of the (reduce, n) block at x, y (rows `stride` apart) in two streaming
// passes: the online (max, sum exp) of each column, then y. f16/bf16 rows go through float
// staging a few rows at a time.
template <typename T>
void softmax_columns(bool log, const T* x, T* y, int64_t reduce, int64_t stride, int64_t n) {
  using C = compute_t<T>;
  const int64_t step = kIsFloat16<T> ? std::max<int64_t>(1, kStagedElements / n) : std::max<int64_t>(reduce, 1);
  C* max = scratch<C>(2, n);
  C* sum = scratch<C>(3, n);
  std::fill(max, max + n, -std::numeric_limits<C>::infinity());
  std::fill(sum, sum + n, C(0));
  for (int64_t r = 0; r < reduce; r += step) {
    const int64_t rows = std::min(step, reduce - r);
    const Staged<T> in = stage_in(x + r * stride, rows, n, stride, 0);
    cols_max_sum_exp(max, sum, in.data, rows, in.stride, n);
  }
  for (int64_t j = 0; j < n; ++j) sum[j] = log ? std::log(sum[j]) : C(1) / sum[j];
  for (int64_t r = 0; r < reduce; r += step) {
    const int64_t rows = std::min(step, reduce - r);
    const Staged<T> in = stage_in(x + r * stride, rows, n, stride, 0);
    const Staged<T> out = stage_out(y + r * stride, rows, n, stride, 1);
    for (int64_t i = 0; i < rows; ++i) {
      const C* xi = in.data + i * in.stride;
      C* yi = out.data + i * out.stride;
      if (log) shift_cols(xi, yi, max, sum, n);
      else exp_shift_scale_cols(xi, yi, max, sum, n);
    }
    commit(out, y + r * stride, rows, n, stride);
  }
}

// x, y: (outer, reduce, inner); normalizes along `reduce`.
template <typename T>
void softmax_along(bool log, const T* x, T* y, ReduceGeometry g, ThreadPool& pool) {
  using C = compute_t<T>;
  const int64_t reduce = g.reduce, inner = g.inner;
  if (inner == 1) {
    pool.parallel_for(g.outer, rows_per_task(reduce), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const Staged<T> in = stage_in(x + o * reduce, 1, reduce, reduce, 0);
        const Staged<T> out = stage_out(y + o * reduce, 1, reduce, reduce, 1);
        softmax_row<C>(log, in.data, out.data, reduce);
        commit(out, y + o * reduce, 1, reduce, reduce);
      }
    });
    return;
  }
  // Tiles of up to kMaxColumns columns keep max and sum in L1; narrower (down to 256) when that
  // gives each thread a couple of tiles.
  const int64_t per_thread = (inner * g.outer + 2 * pool.num_threads() - 1) / (2 * pool.num_threads());
  const int64_t block = std::min({inner, kMaxColumns, std::max<int64_t>(256, (per_thread + 15) / 16 * 16)});
  const int64_t blocks = (inner + block - 1) / block;
  const int64_t grain = std::max<int64_t>(1, kMinTaskElements / std::max<int64_t>(1, reduce * block));
  pool.parallel_for(g.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks, j0 = (t % blocks) * block;
      const int64_t offset = o * reduce * inner + j0;
      softmax_columns<T>(log, x + offset, y + offset, reduce, inner, std::min(block, inner - j0));
    }
  });
}

template <typename T>
KernelFn make_softmax(const Node& node) {
  const bool log = node.op_type() == "LogSoftmax";
  const bool coerce_2d = node.opset() < 13;
  const int64_t axis_attr = node.attr_int("axis", coerce_2d ? 1 : -1);
  return [log, coerce_2d, axis_attr](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    ReduceGeometry g = axis_geometry(x.dims(), normalize_axis(axis_attr, x.rank()));
    if (coerce_2d) g = {g.outer, g.reduce * g.inner, 1};
    softmax_along<T>(log, x.data<T>(), ctx.out(0).data<T>(), g, ctx.threads());
  };
}

template <typename T>
void register_for(KernelTable& t) {
  t.add("", "Softmax", dtype_of<T>(), make_softmax<T>);
  t.add("", "LogSoftmax", dtype_of<T>(), make_softmax<T>);
}

}  // namespace

void register_softmax_kernels(KernelTable& t) {
  register_for<float>(t);
  register_for<double>(t);
  register_for<Half>(t);
  register_for<BFloat16>(t);
}

}  // namespace trainrt
