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

// max / min that return NaN once either side is NaN (numpy semantics).
template <typename C>
[[gnu::always_inline]] inline C nan_max(C a, C b) {
  return (b > a || b != b) ? b : a;
}
template <typename C>
[[gnu::always_inline]] inline C nan_min(C a, C b) {
  return (b < a || b != b) ? b : a;
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
    C part = init;
    for (; i < end; ++i) part = combine(part, map(x[i]));
    for (int j = 0; j < L; ++j) part = combine(part, acc[j]);
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

#define TRAINRT_COL_FOLD(name, C, expr)                                      \
  TRAINRT_SIMD_CLONES void name(C* acc, const C* x, int64_t n) {             \
    for (int64_t j = 0; j < n; ++j) acc[j] = expr;                           \
  }
