// CPU kernels of MatMul and Gemm.
//
// f32 and bf16 run on oneDNN (gemm.h; bf16 sums in f32, for mixed precision training). The other
// dtypes ONNX allows here (f64, f16, i32, i64) run a plain row loop that accumulates in a wider
// type: f32 for f16, f64 for f64, and wrapping 64-bit integer arithmetic for the integers (numpy's
// results, modulo 2^bits).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/batched_product.h"
#include "trainrt/kernels/cpu/gemm.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// ---- element types of the loop path ----

template <typename T>
using AccOf = std::conditional_t<std::is_integral_v<T>, uint64_t,
                                 std::conditional_t<std::is_same_v<T, double>, double, float>>;

template <typename T>
AccOf<T> load(T x) {
  if constexpr (std::is_same_v<T, Half>)
    return f16_to_f32(x.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_f32(x.bits);
  else if constexpr (std::is_integral_v<T>)
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  else
    return x;
}

template <typename T>
T store(AccOf<T> v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{f32_to_f16(v)};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{f32_to_bf16(v)};
  else
    return static_cast<T>(v);  // integers: modulo 2^bits
}

template <typename T>
double to_double(T x) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(load(x));
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_integral_v<T>) {
    // Truncation toward zero as numpy's astype; out-of-range values saturate instead of being UB.
    if (!std::isfinite(v)) return T{0};
    return static_cast<T>(static_cast<int64_t>(std::clamp(v, -9.2e18, 9.2e18)));
  } else {
    return store<T>(static_cast<AccOf<T>>(v));
  }
}

// One product op(A) op(B) as the loop path sees it: A is (m, k) or stored (k, m) when trans_a,
// B is (k, n) or stored (n, k) when trans_b.
template <typename T>
struct LoopGemm {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb;
  const T* a;
  const T* b;

  // acc(n) = row i of op(A) op(B).
  void row(int64_t i, AccOf<T>* acc) const {
    std::fill(acc, acc + n, AccOf<T>{0});
    for (int64_t l = 0; l < k; ++l) {
      AccOf<T> x = load(trans_a ? a[l * lda + i] : a[i * lda + l]);
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) acc[j] += x * load(b[j * ldb + l]);
      } else {
        const T* b_row = b + l * ldb;
        for (int64_t j = 0; j < n; ++j) acc[j] += x * load(b_row[j]);
      }
    }
  }

  // Runs emit(i, acc) for every row i, rows split across the pool.
  template <typename Emit>
  void for_each_row(ThreadPool& pool, Emit&& emit) const {
    int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, n * k));
    pool.parallel_for(m, grain, [&](int64_t begin, int64_t end) {
      std::vector<AccOf<T>> acc(static_cast<size_t>(n));
      for (int64_t i = begin; i < end; ++i) {
        row(i, acc.data());
        emit(i, acc.data());
      }
    });
  }
};

// ---- MatMul ----

struct MatMulPlan {
  int64_t m = 1, n = 1, k = 1;
  std::vector<BatchDim> batch;  // batched_product.h
};

// The concrete-shape counterpart of the schema's inference, with the same checks: a K or batch
// dim that was symbolic when the plan was built is checked here.
MatMulPlan plan_matmul(const std::string& where, const std::vector<int64_t>& a,
                       const std::vector<int64_t>& b, const std::vector<int64_t>& out) {
  if (a.empty() || b.empty())
    throw ShapeError(
        fmt(where, ": MatMul needs rank >= 1, got shapes ", to_string(a), " and ", to_string(b)));
  MatMulPlan p;
  p.k = a.back();
  p.m = a.size() >= 2 ? a[a.size() - 2] : 1;
  p.n = b.size() >= 2 ? b.back() : 1;
  int64_t k_b = b.size() >= 2 ? b[b.size() - 2] : b[0];
  if (p.k != k_b)
    throw ShapeError(fmt(where, ": inner dims differ: input 0 ", to_string(a), " has K = ", p.k,
                         ", input 1 ", to_string(b), " has K = ", k_b));
  std::vector<int64_t> expected;
  p.batch = plan_batch(where, a, a.size() - std::min<size_t>(a.size(), 2), b,
                       b.size() - std::min<size_t>(b.size(), 2), p.m, p.n, p.k, expected);
  if (a.size() >= 2) expected.push_back(p.m);
  if (b.size() >= 2) expected.push_back(p.n);
  TRAINRT_CHECK(out == expected, where, ": output allocated as ", to_string(out), ", expected ",
                to_string(expected));
  return p;
}

// oneDNN runs f32 and bf16 (gemm_batched); the other dtypes take the row loop.
template <typename T>
constexpr bool kOnDnn = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// Contiguous operands per matrix: A (m, k), B (k, n), C (m, n); BLAS wants leading dims >= 1.
template <typename T>
void matmul_onednn(const MatMulPlan& p, const T* a, const T* b, T* y) {
  int64_t lda = std::max<int64_t>(1, p.k), ldb = std::max<int64_t>(1, p.n), ldc = ldb;
  if (p.batch.size() == 1 && p.batch[0].stride_b == 0 && p.batch[0].stride_a == p.m * p.k) {
    // B shared by every matrix of a contiguous A: one product with the batch folded into M.
    gemm_batched<T>(1, false, false, p.batch[0].size * p.m, p.n, p.k, 1.f, a, lda, 0, b, ldb, 0, 0.f, y, ldc, 0);
    return;
  }
  for_each_batch_run(p.batch, [&](int64_t oa, int64_t ob, int64_t oc, const BatchDim& inner) {
    gemm_batched<T>(inner.size, false, false, p.m, p.n, p.k, 1.f, a + oa, lda, inner.stride_a, b + ob, ldb,
                    inner.stride_b, 0.f, y + oc, ldc, inner.stride_c);
  });
}

template <typename T>
void matmul_loop(const MatMulPlan& p, const T* a, const T* b, T* y, ThreadPool& pool) {
  for_each_batch_run(p.batch, [&](int64_t oa, int64_t ob, int64_t oc, const BatchDim& inner) {
    for (int64_t i = 0; i < inner.size; ++i) {
      LoopGemm<T> g{false, false, p.m, p.n, p.k, p.k, p.n, a + oa + i * inner.stride_a, b + ob + i * inner.stride_b};
      T* c = y + oc + i * inner.stride_c;
      g.for_each_row(pool, [&](int64_t r, const AccOf<T>* acc) {
        for (int64_t j = 0; j < p.n; ++j) c[r * p.n + j] = store<T>(acc[j]);
      });
    }
  });
}

template <typename T>
KernelFn make_matmul(const Node& node) {
  return [where = node.describe(), last = LastPlan<MatMulPlan>()](KernelContext& ctx) mutable {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    Tensor& y = ctx.out(0);
    const MatMulPlan& p = last.get(a.dims(), b.dims(), y.dims(), [&] { return plan_matmul(where, a.dims(), b.dims(), y.dims()); });
    if (y.numel() == 0) return;
    if constexpr (kOnDnn<T>)
      matmul_onednn(p, a.data<T>(), b.data<T>(), y.data<T>());
    else
      matmul_loop(p, a.data<T>(), b.data<T>(), y.data<T>(), ctx.threads());
  };
}

// ---- Gemm ----

struct GemmAttrs {
  std::string where;
  bool trans_a, trans_b;
  float alpha, beta;
};

GemmAttrs gemm_attrs(const Node& node) {
  return {node.describe(), node.attr_int("transA", 0) != 0, node.attr_int("transB", 0) != 0,
          node.attr_float("alpha", 1.f), node.attr_float("beta", 1.f)};
}

// M, N, K of a Gemm on concrete shapes, checked like the schema's inference.
struct GemmDims {
  int64_t m, n, k;
};

GemmDims gemm_dims(const GemmAttrs& g, const KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.rank() != 2 || b.rank() != 2)
    throw ShapeError(fmt(g.where, ": A and B must be 2-D, got ", to_string(a.dims()), " and ",
                         to_string(b.dims())));
  GemmDims d{a.dim(g.trans_a ? 1 : 0), b.dim(g.trans_b ? 0 : 1), a.dim(g.trans_a ? 0 : 1)};
  int64_t k_b = b.dim(g.trans_b ? 1 : 0);
  if (d.k != k_b)
    throw ShapeError(fmt(g.where, ": inner dims differ: A ", to_string(a.dims()), " has K = ", d.k,
                         ", B ", to_string(b.dims()), " has K = ", k_b));
  if (ctx.has_in(2)) {
    const Tensor& c = ctx.in(2);
    bool ok = c.rank() <= 2 && (c.rank() < 1 || c.dim(-1) == 1 || c.dim(-1) == d.n) &&
              (c.rank() < 2 || c.dim(0) == 1 || c.dim(0) == d.m);
    if (!ok)
      throw ShapeError(fmt(g.where, ": input 2 (C) of shape ", to_string(c.dims()),
                           " does not broadcast to the result (", d.m, ", ", d.n, ")"));
  }
  const Tensor& y = ctx.out(0);
  const int64_t rows = ctx.whole_output() ? d.m : ctx.row_end - ctx.row_begin;
  TRAINRT_CHECK(ctx.whole_output() || (0 <= ctx.row_begin && ctx.row_begin <= ctx.row_end && ctx.row_end <= d.m),
                g.where, ": rows [", ctx.row_begin, ", ", ctx.row_end, ") of a result with ", d.m, " rows");
  TRAINRT_CHECK(y.rank() == 2 && y.dim(0) == rows && y.dim(1) == d.n, g.where, ": output allocated as ",
                to_string(y.dims()), ", expected (", rows, ", ", d.n, ")");
  return d;
}

// C's element for result (i, j): C is (), (N), (1), (M, N), (1, N), (M, 1) or (1, 1).
template <typename T>
T c_at(const Tensor& c, int64_t i, int64_t j) {
  int64_t rows = c.rank() == 2 ? c.dim(0) : 1, cols = c.rank() >= 1 ? c.dim(-1) : 1;
  return c.data<T>()[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
}

// Rows [r0, r1) of the result into y (r1 - r0, N): the same product on rows r0.. of op(A), which
// are rows of A, or columns of A (transA: A is (K, M)) read with A's own leading dimension. The
// library never splits K (gemm.h), but oneDNN picks its kernel per piece shape: the rows are those
// of the whole product bit for bit in the cases tested (runtime/consumed_row_blocks_test.cc, the
// weight gradients X^T dY among them), within rounding otherwise. In bf16, beta * C adds C's bf16
// values to the f32 sums.
template <typename T>
void gemm_onednn(const GemmAttrs& g, const GemmDims& d, int64_t r0, int64_t r1, const Tensor& a, const Tensor& b,
                 const Tensor* c, T* y) {
  if (c) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < d.n; ++j) y[(i - r0) * d.n + j] = c_at<T>(*c, i, j);
  }
  const int64_t lda = std::max<int64_t>(1, a.dim(1));
  const T* a_rows = a.data<T>() + (g.trans_a ? r0 : r0 * lda);
  gemm_batched<T>(1, g.trans_a, g.trans_b, r1 - r0, d.n, d.k, g.alpha, a_rows, lda, 0, b.data<T>(),
                  std::max<int64_t>(1, b.dim(1)), 0, c ? g.beta : 0.f, y, std::max<int64_t>(1, d.n), 0);
}

// As the ONNX reference: the product in T's own arithmetic, then alpha and beta * C in f64.
template <typename T>
void gemm_loop(const GemmAttrs& g, const GemmDims& d, const Tensor& a, const Tensor& b, const Tensor* c, T* y,
               ThreadPool& pool) {
  LoopGemm<T> loop{g.trans_a, g.trans_b, d.m, d.n, d.k, a.dim(1), b.dim(1), a.data<T>(), b.data<T>()};
  loop.for_each_row(pool, [&](int64_t i, const AccOf<T>* acc) {
    for (int64_t j = 0; j < d.n; ++j) {
      double v = g.alpha * to_double(store<T>(acc[j]));
      if (c) v += g.beta * to_double(c_at<T>(*c, i, j));
      y[i * d.n + j] = from_double<T>(v);
    }
  });
}

template <typename T>
KernelFn make_gemm(const Node& node) {
  return [g = gemm_attrs(node)](KernelContext& ctx) {
    TRAINRT_CHECK(kOnDnn<T> || ctx.whole_output(), g.where, ": no row-range entry for ", dtype_name(dtype_of<T>()));
    GemmDims d = gemm_dims(g, ctx);
    const Tensor* c = ctx.has_in(2) && g.beta != 0.f ? &ctx.in(2) : nullptr;  // beta 0 ignores C
    T* y = ctx.out(0).data<T>();
    if constexpr (kOnDnn<T>)
      gemm_onednn(g, d, ctx.whole_output() ? 0 : ctx.row_begin, ctx.whole_output() ? d.m : ctx.row_end, ctx.in(0),
                  ctx.in(1), c, y);
    else
      gemm_loop(g, d, ctx.in(0), ctx.in(1), c, y, ctx.threads());
  };
}

template <typename T>
void add_kernels(KernelTable& t) {
  t.add("", "MatMul", dtype_of<T>(), make_matmul<T>);
  t.add("", "Gemm", dtype_of<T>(), make_gemm<T>);
  if constexpr (kOnDnn<T>) t.add_row_ranges("", "Gemm", dtype_of<T>());
}

}  // namespace

void register_matmul_kernels(KernelTable& t) {
  add_kernels<float>(t);
  add_kernels<BFloat16>(t);
  add_kernels<double>(t);
  add_kernels<Half>(t);
  add_kernels<int32_t>(t);
  add_kernels<int64_t>(t);
  register_einsum_kernels(t);
}

}  // namespace trainrt
