#include "trainrt/kernels/cpu/reduce_math.h"

#include <cmath>

#include "trainrt/core/simd.h"

namespace trainrt {
namespace {

// Two 512-bit registers of partial results: enough independent chains to hide add latency.
template <typename C>
constexpr int kLanes = 2 * 64 / static_cast<int>(sizeof(C));
// Rows are folded in blocks whose lane results are combined into a running total; for sums the
// total is a double, so a float row of any length rounds about like one of kBlock elements.
constexpr int64_t kBlock = 2048;

[[gnu::always_inline]] inline float exp_of(float x) { return exp_approx(x); }
[[gnu::always_inline]] inline double exp_of(double x) { return std::exp(x); }

// max / min that return NaN once either side is NaN (numpy semantics): b if b is NaN, else
// b > a ? b : a (a NaN a stays). Written as a plain compare-select (one maxps) and a separate NaN
// select: the same values as (b > a || b != b) ? b : a, but that form makes GCC branch on every
// compare once the lanes of fold_row are combined, a mispredict per lane on random data.
template <typename C>
[[gnu::always_inline]] inline C nan_max(C a, C b) {
  const C m = b > a ? b : a;
  return b != b ? b : m;
}
template <typename C>
[[gnu::always_inline]] inline C nan_min(C a, C b) {
  const C m = b < a ? b : a;
  return b != b ? b : m;
}

// acc[0] = combine of acc[0, 2W) as a tree: each level is one vector operation of width W.
template <int W, typename C, typename Combine>
[[gnu::always_inline]] inline void combine_lanes(C* acc, Combine combine) {
  if constexpr (W >= 1) {
    for (int j = 0; j < W; ++j) acc[j] = combine(acc[j], acc[j + W]);
    combine_lanes<W / 2>(acc, combine);
  }
}

// Folds map(x[i]) over x[0, n) with `combine`, kLanes independent lanes per block; block results
// are combined into a Total.
template <typename Total, typename C, typename Map, typename Combine>
[[gnu::always_inline]] inline C fold_row(const C* x, int64_t n, C init, Map map, Combine combine) {
  constexpr int L = kLanes<C>;
  Total total = init;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = b + kBlock < n ? b + kBlock : n;
    C acc[L];
    for (int j = 0; j < L; ++j) acc[j] = init;
    int64_t i = b;
    for (; i + L <= end; i += L)
      for (int j = 0; j < L; ++j) acc[j] = combine(acc[j], map(x[i + j]));
    combine_lanes<L / 2>(acc, combine);
    C part = acc[0];
    for (; i < end; ++i) part = combine(part, map(x[i]));
    total = combine(total, static_cast<Total>(part));
  }
  return static_cast<C>(total);
}

constexpr auto kAdd = [](auto a, auto b) { return a + b; };
constexpr auto kMul = [](auto a, auto b) { return a * b; };
constexpr auto kMax = [](auto a, auto b) { return nan_max(a, b); };
constexpr auto kMin = [](auto a, auto b) { return nan_min(a, b); };

template <typename C>
[[gnu::always_inline]] inline C sum_of(const C* x, int64_t n, auto map) {
  return fold_row<double>(x, n, C(0), map, kAdd);
}

template <typename C>
[[gnu::always_inline]] inline C row_max_t(const C* x, int64_t n) {
  return fold_row<C>(x, n, -std::numeric_limits<C>::infinity(), [](C v) { return v; }, kMax);
}
template <typename C>
[[gnu::always_inline]] inline C row_min_t(const C* x, int64_t n) {
  return fold_row<C>(x, n, std::numeric_limits<C>::infinity(), [](C v) { return v; }, kMin);
}
template <typename C>
[[gnu::always_inline]] inline C row_prod_t(const C* x, int64_t n) {
  return fold_row<C>(x, n, C(1), [](C v) { return v; }, kMul);
}

template <typename C>
[[gnu::always_inline]] inline C exp_shift_sum_t(const C* x, C* y, C shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_of(x[i] - shift);
  return sum_of(y, n, [](C v) { return v; });
}

// acc[j] = combine(acc[j], map(x[r * stride + j])) over r < rows: four rows per update of acc,
// so acc is loaded and stored once per four rows.
template <typename C, typename Map, typename Combine>
[[gnu::always_inline]] inline void fold_cols(C* __restrict acc, const C* x, int64_t rows, int64_t stride, int64_t n,
                                             Map map, Combine combine) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const C* x0 = x + r * stride;
    const C* x1 = x0 + stride;
    const C* x2 = x1 + stride;
    const C* x3 = x2 + stride;
    for (int64_t j = 0; j < n; ++j)
      acc[j] = combine(acc[j], combine(combine(map(x0[j]), map(x1[j])), combine(map(x2[j]), map(x3[j]))));
  }
  for (; r < rows; ++r) {
    const C* xr = x + r * stride;
    for (int64_t j = 0; j < n; ++j) acc[j] = combine(acc[j], map(xr[j]));
  }
}

// exp(x - m), except 1 where x == m: two equal infinities would give NaN, and their term is
// either the max itself (+inf) or rescaled away by a later finite max (-inf).
template <typename C>
[[gnu::always_inline]] inline C exp_from(C x, C m) {
  return x == m ? C(1) : exp_of(x - m);
}

template <typename C>
[[gnu::always_inline]] inline void max_sum_exp_cols(C* __restrict max, C* __restrict sum, const C* x, int64_t rows,
                                                    int64_t stride, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const C* x0 = x + r * stride;
    const C* x1 = x0 + stride;
    const C* x2 = x1 + stride;
    const C* x3 = x2 + stride;
    for (int64_t j = 0; j < n; ++j) {
      const C m = nan_max(nan_max(max[j], nan_max(x0[j], x1[j])), nan_max(x2[j], x3[j]));
      sum[j] = sum[j] * exp_from(max[j], m) + ((exp_from(x0[j], m) + exp_from(x1[j], m)) +
                                               (exp_from(x2[j], m) + exp_from(x3[j], m)));
      max[j] = m;
    }
  }
  for (; r < rows; ++r) {
    const C* xr = x + r * stride;
    for (int64_t j = 0; j < n; ++j) {
      const C m = nan_max(max[j], xr[j]);
      sum[j] = sum[j] * exp_from(max[j], m) + exp_from(xr[j], m);
      max[j] = m;
    }
  }
}

template <typename C>
[[gnu::always_inline]] inline void normalize_row_t(const C* x, C* y, int64_t n, C mean, C inv_std,
                                                   const C* scale, const C* bias) {
  if (bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv_std * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv_std * scale[i];
  }
}

}  // namespace

// ---- Row reductions ----

TRAINRT_SIMD_CLONES float row_sum(const float* x, int64_t n) { return sum_of(x, n, [](float v) { return v; }); }
TRAINRT_SIMD_CLONES double row_sum(const double* x, int64_t n) { return sum_of(x, n, [](double v) { return v; }); }
TRAINRT_SIMD_CLONES float row_sum_abs(const float* x, int64_t n) {
  return sum_of(x, n, [](float v) { return std::fabs(v); });
}
TRAINRT_SIMD_CLONES double row_sum_abs(const double* x, int64_t n) {
  return sum_of(x, n, [](double v) { return std::fabs(v); });
}
TRAINRT_SIMD_CLONES float row_sum_sq(const float* x, int64_t n) { return sum_of(x, n, [](float v) { return v * v; }); }
TRAINRT_SIMD_CLONES double row_sum_sq(const double* x, int64_t n) {
  return sum_of(x, n, [](double v) { return v * v; });
}
TRAINRT_SIMD_CLONES float row_prod(const float* x, int64_t n) { return row_prod_t(x, n); }
TRAINRT_SIMD_CLONES double row_prod(const double* x, int64_t n) { return row_prod_t(x, n); }
TRAINRT_SIMD_CLONES float row_max(const float* x, int64_t n) { return row_max_t(x, n); }
TRAINRT_SIMD_CLONES double row_max(const double* x, int64_t n) { return row_max_t(x, n); }
TRAINRT_SIMD_CLONES float row_min(const float* x, int64_t n) { return row_min_t(x, n); }
TRAINRT_SIMD_CLONES double row_min(const double* x, int64_t n) { return row_min_t(x, n); }
TRAINRT_SIMD_CLONES float row_sum_exp(const float* x, int64_t n, float shift) {
  return sum_of(x, n, [shift](float v) { return exp_of(v - shift); });
}
TRAINRT_SIMD_CLONES double row_sum_exp(const double* x, int64_t n, double shift) {
  return sum_of(x, n, [shift](double v) { return exp_of(v - shift); });
}
TRAINRT_SIMD_CLONES float row_sum_sq_dev(const float* x, int64_t n, float mean) {
  return sum_of(x, n, [mean](float v) { return (v - mean) * (v - mean); });
}
TRAINRT_SIMD_CLONES double row_sum_sq_dev(const double* x, int64_t n, double mean) {
  return sum_of(x, n, [mean](double v) { return (v - mean) * (v - mean); });
}

// ---- Column folds ----

TRAINRT_SIMD_CLONES void cols_add(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return v; }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_add(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return v; }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_add_abs(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return std::fabs(v); }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_add_abs(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return std::fabs(v); }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_add_sq(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return v * v; }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_add_sq(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return v * v; }, kAdd);
}
TRAINRT_SIMD_CLONES void cols_mul(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return v; }, kMul);
}
TRAINRT_SIMD_CLONES void cols_mul(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return v; }, kMul);
}
TRAINRT_SIMD_CLONES void cols_max(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return v; }, kMax);
}
TRAINRT_SIMD_CLONES void cols_max(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return v; }, kMax);
}
TRAINRT_SIMD_CLONES void cols_min(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](float v) { return v; }, kMin);
}
TRAINRT_SIMD_CLONES void cols_min(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n) {
  fold_cols(acc, x, rows, stride, n, [](double v) { return v; }, kMin);
}
TRAINRT_SIMD_CLONES void cols_max_sum_exp(float* max, float* sum, const float* x, int64_t rows, int64_t stride,
                                          int64_t n) {
  max_sum_exp_cols(max, sum, x, rows, stride, n);
}
TRAINRT_SIMD_CLONES void cols_max_sum_exp(double* max, double* sum, const double* x, int64_t rows, int64_t stride,
                                          int64_t n) {
  max_sum_exp_cols(max, sum, x, rows, stride, n);
}

// ---- Softmax steps ----

TRAINRT_SIMD_CLONES float exp_shift_sum(const float* x, float* y, float shift, int64_t n) {
  return exp_shift_sum_t(x, y, shift, n);
}
TRAINRT_SIMD_CLONES double exp_shift_sum(const double* x, double* y, double shift, int64_t n) {
  return exp_shift_sum_t(x, y, shift, n);
}
TRAINRT_SIMD_CLONES void scale(const float* x, float* y, float s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * s;
}
TRAINRT_SIMD_CLONES void scale(const double* x, double* y, double s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * s;
}
TRAINRT_SIMD_CLONES void exp_shift_scale_cols(const float* x, float* y, const float* shift, const float* s,
                                              int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j] - shift[j]) * s[j];
}
TRAINRT_SIMD_CLONES void exp_shift_scale_cols(const double* x, double* y, const double* shift, const double* s,
                                              int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j] - shift[j]) * s[j];
}
TRAINRT_SIMD_CLONES void shift(const float* x, float* y, float a, float b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - a) - b;
}
TRAINRT_SIMD_CLONES void shift(const double* x, double* y, double a, double b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - a) - b;
}
TRAINRT_SIMD_CLONES void shift_cols(const float* x, float* y, const float* a, const float* b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - a[j]) - b[j];
}
TRAINRT_SIMD_CLONES void shift_cols(const double* x, double* y, const double* a, const double* b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - a[j]) - b[j];
}

// ---- Layer normalization ----

TRAINRT_SIMD_CLONES void normalize_row(const float* x, float* y, int64_t n, float mean, float inv_std,
                                       const float* scale, const float* bias) {
  normalize_row_t(x, y, n, mean, inv_std, scale, bias);
}
TRAINRT_SIMD_CLONES void normalize_row(const double* x, double* y, int64_t n, double mean, double inv_std,
                                       const double* scale, const double* bias) {
  normalize_row_t(x, y, n, mean, inv_std, scale, bias);
}

}  // namespace trainrt
