// CPU kernels of the Reduce* ops (ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp), and the registration of
// the whole reduction family.
//
// A reduction runs as (outer, reduce, inner) loops (reduce_util.h): contiguous rows when the
// reduced axes are innermost, column folds otherwise; reduced axes that are not one contiguous
// group are first moved last by a copy. Float types use the vectorized loops of reduce_math.h;
// integer and bool inputs take a plain scalar path (exact in int64, or in double for L2, LogSum
// and LogSumExp). Empty reductions give the fold's identity: 0, 1, -inf / lowest for Max,
// +inf / highest for Min, log(0) = -inf for LogSum and LogSumExp, and 0/0 = NaN for Mean.
#include <algorithm>
#include <cmath>
#include <limits>

#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/reduce_axes.h"

namespace trainrt {
namespace {

// The type a result is finished in: Out itself when it is float or double (a caller may ask for
// a double log-sum-exp of float data), else the compute type.
template <typename Out, typename C>
using finish_t = std::conditional_t<std::is_floating_point_v<Out>, Out, C>;

template <typename Out, typename W>
Out cast_out(W v) {
  if constexpr (std::is_floating_point_v<Out>) return static_cast<Out>(v);
  else return from_compute<Out>(v);
}

// Finishes a fold: acc is the folded value, max the row max (LogSumExp only), n the count.
template <typename W, typename C>
W finish(ReduceOp op, C acc, C max, int64_t n) {
  switch (op) {
    case ReduceOp::kMean: return static_cast<W>(acc) / static_cast<W>(n);
    case ReduceOp::kL2: return std::sqrt(static_cast<W>(acc));
    case ReduceOp::kLogSum: return std::log(static_cast<W>(acc));
    // exp(x - max) <= 1 cannot overflow; max is added in W so a large max loses nothing.
    case ReduceOp::kLogSumExp:
      return std::isfinite(max) ? static_cast<W>(max) + std::log(static_cast<W>(acc)) : static_cast<W>(max);
    default: return static_cast<W>(acc);
  }
}

// Folds a contiguous row into the state (acc, max) that finish() completes; max is the row max
// for LogSumExp (acc is then sum exp(x - max)), unused otherwise.
template <typename C>
void fold_row(ReduceOp op, const C* x, int64_t n, C& acc, C& max) {
  switch (op) {
    case ReduceOp::kMax: acc = row_max(x, n); break;
    case ReduceOp::kMin: acc = row_min(x, n); break;
    case ReduceOp::kProd: acc = row_prod(x, n); break;
    case ReduceOp::kL1: acc = row_sum_abs(x, n); break;
    case ReduceOp::kL2:
    case ReduceOp::kSumSquare: acc = row_sum_sq(x, n); break;
    case ReduceOp::kLogSumExp:
      max = row_max(x, n);
      acc = std::isfinite(max) ? row_sum_exp(x, n, max) : C(0);
      break;
    default: acc = row_sum(x, n); break;
  }
}

// ---- Column folds: the state of a block of n columns is acc (n) and, for LogSumExp, max (n). ----

// Columns per block: the fold state stays in L1 while whole rows stream through.
constexpr int64_t kMaxColumns = 4096;
// f16/bf16 rows are staged in groups of about this many elements.
constexpr int64_t kStagedElements = int64_t{1} << 16;

template <typename C>
C max_nan(C a, C b) {
  return (b > a || b != b) ? b : a;
}

template <typename C>
void init_columns(ReduceOp op, C* acc, C* max, int64_t n) {
  const C inf = std::numeric_limits<C>::infinity();
  const C init = op == ReduceOp::kMax    ? -inf
                 : op == ReduceOp::kMin  ? inf
                 : op == ReduceOp::kProd ? C(1)
                                         : C(0);
  std::fill(acc, acc + n, init);
  std::fill(max, max + n, -inf);
}

// Folds `rows` rows of the block at x (rows `stride` apart, n columns) into (acc, max).
template <typename T, typename C>
void fold_columns(ReduceOp op, const T* x, int64_t rows, int64_t stride, int64_t n, C* acc, C* max) {
  const int64_t step = kIsFloat16<T> ? std::max<int64_t>(1, kStagedElements / n) : std::max<int64_t>(1, rows);
  for (int64_t r = 0; r < rows; r += step) {
    const int64_t m = std::min(step, rows - r);
    const Staged<T> in = stage_in(x + r * stride, m, n, stride, 0);
    switch (op) {
      case ReduceOp::kMax: cols_max(acc, in.data, m, in.stride, n); break;
      case ReduceOp::kMin: cols_min(acc, in.data, m, in.stride, n); break;
      case ReduceOp::kProd: cols_mul(acc, in.data, m, in.stride, n); break;
      case ReduceOp::kL1: cols_add_abs(acc, in.data, m, in.stride, n); break;
      case ReduceOp::kL2:
      case ReduceOp::kSumSquare: cols_add_sq(acc, in.data, m, in.stride, n); break;
      case ReduceOp::kLogSumExp: cols_max_sum_exp(max, acc, in.data, m, in.stride, n); break;
      default: cols_add(acc, in.data, m, in.stride, n); break;
    }
  }
}

// Folds the state (acc2, max2) of other rows of the same columns into (acc, max).
template <typename C>
void merge_columns(ReduceOp op, C* acc, C* max, const C* acc2, const C* max2, int64_t n) {
  const auto rescale = [](C from, C to) { return from == to ? C(1) : std::exp(from - to); };
  for (int64_t j = 0; j < n; ++j) {
    switch (op) {
      case ReduceOp::kMax: acc[j] = max_nan(acc[j], acc2[j]); break;
      case ReduceOp::kMin: acc[j] = -max_nan(-acc[j], -acc2[j]); break;
      case ReduceOp::kProd: acc[j] *= acc2[j]; break;
      case ReduceOp::kLogSumExp: {
        const C m = max_nan(max[j], max2[j]);
        acc[j] = acc[j] * rescale(max[j], m) + acc2[j] * rescale(max2[j], m);
        max[j] = m;
        break;
      }
      default: acc[j] += acc2[j]; break;
    }
  }
}

template <typename Out, typename C>
void finish_columns(ReduceOp op, const C* acc, const C* max, int64_t reduce, int64_t n, Out* out) {
  using W = finish_t<Out, C>;
  for (int64_t j = 0; j < n; ++j) out[j] = cast_out<Out>(finish<W>(op, acc[j], max[j], reduce));
}

// y (outer, inner) = the column folds of x (outer, reduce, inner) with inner > 1: tiles of up to
// kMaxColumns columns; when there are too few tiles to busy every thread (a reduction over the
// leading axis), the rows are split as well, folded apart and merged.
template <typename T, typename Out>
void reduce_columns(ReduceOp op, const T* x, Out* y, ReduceGeometry g, ThreadPool& pool) {
  using C = compute_t<T>;
  const int64_t reduce = g.reduce, inner = g.inner;
  const int64_t block = std::min(inner, kMaxColumns), blocks = (inner + block - 1) / block;
  const int64_t tiles = g.outer * blocks;
  const int64_t wanted = 4 * pool.num_threads();
  int64_t splits = 1;
  if (tiles < wanted) splits = std::min({(wanted + tiles - 1) / tiles, reduce * block / kMinTaskElements, reduce});
  splits = std::max<int64_t>(1, splits);
  const int64_t split_rows = (reduce + splits - 1) / splits;
  const auto tile = [&](int64_t t, int64_t& offset, int64_t& n) {  // -> first element, columns
    const int64_t o = t / blocks, j0 = (t % blocks) * block;
    offset = o * reduce * inner + j0;
    n = std::min(block, inner - j0);
    return o * inner + j0;
  };
  if (splits == 1) {
    const int64_t grain = std::max<int64_t>(1, kMinTaskElements / std::max<int64_t>(1, reduce * block));
    pool.parallel_for(tiles, grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t offset, n;
        const int64_t out = tile(t, offset, n);
        C* acc = scratch<C>(1, n);
        C* max = scratch<C>(2, n);
        init_columns(op, acc, max, n);
        fold_columns(op, x + offset, reduce, inner, n, acc, max);
        finish_columns(op, acc, max, reduce, n, y + out);
      }
    });
    return;
  }
  std::vector<C> state(static_cast<size_t>(2 * splits * tiles * block));  // (split, tile): acc, max
  pool.parallel_for(splits * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      int64_t offset, n;
      tile(u % tiles, offset, n);
      const int64_t r0 = std::min(reduce, u / tiles * split_rows);
      const int64_t rows = std::min(split_rows, reduce - r0);
      C* acc = state.data() + 2 * u * block;
      init_columns(op, acc, acc + block, n);
      fold_columns(op, x + offset + r0 * inner, rows, inner, n, acc, acc + block);
    }
  });
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t offset, n;
    const int64_t out = tile(t, offset, n);
    C* acc = state.data() + 2 * t * block;
    for (int64_t s = 1; s < splits; ++s) {
      const C* part = state.data() + 2 * (s * tiles + t) * block;
      merge_columns(op, acc, acc + block, part, part + block, n);
    }
    finish_columns(op, acc, acc + block, reduce, n, y + out);
  }
}

// y (outer) = the folds of the rows of x (outer, reduce). A few long rows (a reduction over
// every axis) are split into parts, folded apart and merged, so every thread has work.
template <typename T, typename Out>
void reduce_rows(ReduceOp op, const T* x, Out* y, ReduceGeometry g, ThreadPool& pool) {
  using C = compute_t<T>;
  using W = finish_t<Out, C>;
  const int64_t reduce = g.reduce, wanted = 4 * pool.num_threads();
  int64_t splits = 1;
  if (g.outer < wanted) splits = std::max<int64_t>(1, std::min(wanted / g.outer, reduce / kMinTaskElements));
  const int64_t part = (reduce + splits - 1) / splits;
  std::vector<C> state(static_cast<size_t>(splits > 1 ? 2 * splits * g.outer : 0));  // (split, row): acc, max
  pool.parallel_for(splits * g.outer, splits > 1 ? 1 : rows_per_task(reduce), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t o = u % g.outer, r0 = std::min(reduce, u / g.outer * part);
      const int64_t n = std::min(part, reduce - r0);
      const Staged<T> row = stage_in(x + o * reduce + r0, 1, n, n, 0);
      C acc = 0, max = -std::numeric_limits<C>::infinity();
      fold_row(op, row.data, n, acc, max);
      if (splits == 1) {
        y[o] = cast_out<Out>(finish<W>(op, acc, max, reduce));
      } else {
        state[static_cast<size_t>(2 * u)] = acc;
        state[static_cast<size_t>(2 * u + 1)] = max;
      }
    }
  });
  for (int64_t o = 0; o < g.outer && splits > 1; ++o) {
    C* first = state.data() + 2 * o;
    for (int64_t s = 1; s < splits; ++s) {
      const C* other = state.data() + 2 * (s * g.outer + o);
      merge_columns(op, first, first + 1, other, other + 1, 1);
    }
    y[o] = cast_out<Out>(finish<W>(op, first[0], first[1], reduce));
  }
}

// ---- Integer and bool inputs: scalar folds in A (int64; double for L2, LogSum, LogSumExp). ----

template <typename A>
A combine_integral(ReduceOp op, A acc, A v, A max) {
  switch (op) {
    case ReduceOp::kMax: return v > acc ? v : acc;
    case ReduceOp::kMin: return v < acc ? v : acc;
    case ReduceOp::kProd: return acc * v;
    case ReduceOp::kL1: return acc + (v < 0 ? -v : v);
    case ReduceOp::kL2:
    case ReduceOp::kSumSquare: return acc + v * v;
    case ReduceOp::kLogSumExp: return acc + std::exp(static_cast<double>(v - max));
    default: return acc + v;
  }
}

template <typename T, typename A>
T finish_integral(ReduceOp op, A acc, int64_t reduce, A max) {
  double v;
  switch (op) {
    case ReduceOp::kMean: return reduce ? static_cast<T>(acc / static_cast<A>(reduce)) : T(0);
    case ReduceOp::kL2: v = std::sqrt(static_cast<double>(acc)); break;
    case ReduceOp::kLogSum: v = std::log(static_cast<double>(acc)); break;
    case ReduceOp::kLogSumExp: v = max + std::log(static_cast<double>(acc)); break;
    default: return static_cast<T>(acc);
  }
  // A float result outside T's range (log 0 = -inf) saturates instead of being undefined.
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  return std::isnan(v) ? T(0) : static_cast<T>(v < lo ? lo : v > hi ? hi : v);
}

template <typename T, typename A>
void reduce_integral_as(ReduceOp op, const T* x, T* y, ReduceGeometry g) {
  const A init = op == ReduceOp::kMax    ? static_cast<A>(std::numeric_limits<T>::lowest())
                 : op == ReduceOp::kMin  ? static_cast<A>(std::numeric_limits<T>::max())
                 : op == ReduceOp::kProd ? A(1)
                                         : A(0);
  std::vector<A> acc(static_cast<size_t>(g.inner)), max(static_cast<size_t>(g.inner));
  for (int64_t o = 0; o < g.outer; ++o) {
    const T* slab = x + o * g.reduce * g.inner;
    std::fill(acc.begin(), acc.end(), init);
    if (op == ReduceOp::kLogSumExp) {
      std::fill(max.begin(), max.end(), static_cast<A>(std::numeric_limits<T>::lowest()));
      for (int64_t r = 0; r < g.reduce; ++r)
        for (int64_t j = 0; j < g.inner; ++j) max[j] = std::max(max[j], static_cast<A>(slab[r * g.inner + j]));
    }
    for (int64_t r = 0; r < g.reduce; ++r)
      for (int64_t j = 0; j < g.inner; ++j)
        acc[j] = combine_integral<A>(op, acc[j], static_cast<A>(slab[r * g.inner + j]), max[j]);
    for (int64_t j = 0; j < g.inner; ++j)
      y[o * g.inner + j] = finish_integral<T, A>(op, acc[j], g.reduce, max[j]);
  }
}

template <typename T>
void reduce_tensor(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, Tensor& y, ThreadPool& pool) {
  std::optional<ReduceGeometry> g = reduce_geometry(x.dims(), mask);
  Tensor moved;
  const T* data = x.data<T>();
  if (!g) {
    g = ReduceGeometry{1, 1, 1};
    for (size_t k = 0; k < mask.size(); ++k) (mask[k] ? g->reduce : g->outer) *= x.dims()[k];
    moved = move_reduced_axes_last(x, mask);
    data = moved.data<T>();
  }
  if constexpr (std::is_floating_point_v<T> || kIsFloat16<T>) {
    reduce_along<T, T>(op, data, y.data<T>(), *g, pool);
  } else if (op == ReduceOp::kL2 || op == ReduceOp::kLogSum || op == ReduceOp::kLogSumExp) {
    reduce_integral_as<T, double>(op, data, y.data<T>(), *g);
  } else {
    reduce_integral_as<T, int64_t>(op, data, y.data<T>(), *g);
  }
}

ReduceOp reduce_op_of(const Node& node) {
  static const std::pair<const char*, ReduceOp> kOps[] = {
      {"ReduceSum", ReduceOp::kSum},      {"ReduceMean", ReduceOp::kMean},
      {"ReduceMax", ReduceOp::kMax},      {"ReduceMin", ReduceOp::kMin},
      {"ReduceProd", ReduceOp::kProd},    {"ReduceL1", ReduceOp::kL1},
      {"ReduceL2", ReduceOp::kL2},        {"ReduceSumSquare", ReduceOp::kSumSquare},
      {"ReduceLogSum", ReduceOp::kLogSum}, {"ReduceLogSumExp", ReduceOp::kLogSumExp}};
  for (const auto& [name, op] : kOps)
    if (node.op_type() == name) return op;
  throw InternalError(fmt(node.describe(), ": not a Reduce* op"));
}

// The reduced-axes mask of a node's last run and what it was made from (X's rank, the axes
// input's values): a run with the same ones allocates nothing. A node's kernel runs one call at a
// time (a session runs its steps in order).
class KeptMask {
 public:
  const std::vector<bool>& of(const ReduceAxes& spec, const Tensor* axes_input, int64_t rank) {
    const bool same =
        made_ && rank == rank_ && (axes_input != nullptr) == had_input_ &&
        (!axes_input || (axes_input->dtype() == DType::kI64 && axes_input->rank() <= 1 &&
                         std::equal(axes_.begin(), axes_.end(), axes_input->data<int64_t>(),
                                    axes_input->data<int64_t>() + axes_input->numel())));
    if (same) return mask_;
    made_ = false;
    mask_ = spec.mask(axes_input, rank);
    axes_ = axes_input ? axes_input->to_i64_vector() : std::vector<int64_t>{};
    rank_ = rank, had_input_ = axes_input != nullptr;
    made_ = true;
    return mask_;
  }

 private:
  bool made_ = false, had_input_ = false;
  int64_t rank_ = -1;
  std::vector<int64_t> axes_;
  std::vector<bool> mask_;
};

KernelFn make_reduce(const Node& node) {
  const ReduceOp op = reduce_op_of(node);
  const ReduceAxes axes = ReduceAxes::of(node);
  return [op, axes, kept = KeptMask()](KernelContext& ctx) mutable {
    const Tensor& x = ctx.in(0);
    const std::vector<bool>& mask = kept.of(axes, ctx.has_in(1) ? &ctx.in(1) : nullptr, x.rank());
    visit_dtype(x.dtype(), [&]<typename T>() { reduce_tensor<T>(op, x, mask, ctx.out(0), ctx.threads()); });
  };
}

}  // namespace

template <typename T, typename Out>
void reduce_along(ReduceOp op, const T* x, Out* y, ReduceGeometry g, ThreadPool& pool) {
  if (g.outer == 0 || g.inner == 0) return;  // no output elements
  if (g.inner == 1) reduce_rows(op, x, y, g, pool);
  else reduce_columns(op, x, y, g, pool);
}

template void reduce_along<float, float>(ReduceOp, const float*, float*, ReduceGeometry, ThreadPool&);
template void reduce_along<double, double>(ReduceOp, const double*, double*, ReduceGeometry, ThreadPool&);
template void reduce_along<Half, Half>(ReduceOp, const Half*, Half*, ReduceGeometry, ThreadPool&);
template void reduce_along<BFloat16, BFloat16>(ReduceOp, const BFloat16*, BFloat16*, ReduceGeometry,
                                               ThreadPool&);
template void reduce_along<float, double>(ReduceOp, const float*, double*, ReduceGeometry, ThreadPool&);
template void reduce_along<Half, double>(ReduceOp, const Half*, double*, ReduceGeometry, ThreadPool&);
template void reduce_along<BFloat16, double>(ReduceOp, const BFloat16*, double*, ReduceGeometry, ThreadPool&);

void register_reduction_kernels(KernelTable& t) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    t.add("", op, kAllTypes, make_reduce);
  register_softmax_kernels(t);
  register_layer_norm_kernels(t);
  register_loss_kernels(t);
  register_linear_cross_entropy_kernels(t);
}

}  // namespace trainrt
