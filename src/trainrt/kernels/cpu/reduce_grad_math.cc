#include "trainrt/kernels/cpu/reduce_grad_math.h"

#include <cmath>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/reduce_math.h"

namespace trainrt {
namespace {

// Two 512-bit registers of partial sums per accumulated quantity (as in reduce_math.cc).
template <typename C>
constexpr int kLanes = 2 * 64 / static_cast<int>(sizeof(C));
constexpr int64_t kBlock = 2048;

[[gnu::always_inline]] inline float exp_of(float x) { return exp_approx(x); }
[[gnu::always_inline]] inline double exp_of(double x) { return std::exp(x); }

// Sums of fa(i) and fb(i) over i < n in kLanes lanes each; each block of kBlock elements is
// added into a double total. A caller wanting one sum passes a constant-zero fb, which the
// compiler drops.
template <typename C, typename FA, typename FB>
[[gnu::always_inline]] inline void sum_pair(int64_t n, FA fa, FB fb, C& out_a, C& out_b) {
  constexpr int L = kLanes<C>;
  double total_a = 0, total_b = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = b + kBlock < n ? b + kBlock : n;
    C acc_a[L], acc_b[L];
    for (int j = 0; j < L; ++j) acc_a[j] = acc_b[j] = C(0);
    int64_t i = b;
    for (; i + L <= end; i += L)
      for (int j = 0; j < L; ++j) {
        acc_a[j] += fa(i + j);
        acc_b[j] += fb(i + j);
      }
    C part_a = 0, part_b = 0;
    for (int j = 0; j < L; ++j) {
      part_a += acc_a[j];
      part_b += acc_b[j];
    }
    for (; i < end; ++i) {
      part_a += fa(i);
      part_b += fb(i);
    }
    total_a += part_a;
    total_b += part_b;
  }
  out_a = static_cast<C>(total_a);
  out_b = static_cast<C>(total_b);
}

template <typename C>
[[gnu::always_inline]] inline C row_dot_t(const C* a, const C* b, int64_t n) {
  C dot, unused;
  sum_pair<C>(n, [&](int64_t i) { return a[i] * b[i]; }, [](int64_t) { return C(0); }, dot, unused);
  return dot;
}

// Four rows per update of acc, so acc is loaded and stored once per four rows.
template <typename C>
[[gnu::always_inline]] inline void cols_add_prod_t(C* __restrict acc, const C* a, const C* b, int64_t rows,
                                                   int64_t stride, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const C* a0 = a + r * stride;
    const C* b0 = b + r * stride;
    const int64_t s1 = stride, s2 = 2 * stride, s3 = 3 * stride;
    for (int64_t j = 0; j < n; ++j)
      acc[j] += (a0[j] * b0[j] + a0[j + s1] * b0[j + s1]) + (a0[j + s2] * b0[j + s2] + a0[j + s3] * b0[j + s3]);
  }
  for (; r < rows; ++r) {
    const C* ar = a + r * stride;
    const C* br = b + r * stride;
    for (int64_t j = 0; j < n; ++j) acc[j] += ar[j] * br[j];
  }
}

template <typename C>
[[gnu::always_inline]] inline void layer_norm_grad_sums_t(const C* dy, const C* x, const C* scale, int64_t n,
                                                          C mean, C inv_std, C& sum_g, C& sum_g_xhat) {
  sum_pair<C>(
      n, [&](int64_t i) { return dy[i] * scale[i]; },
      [&](int64_t i) { return dy[i] * scale[i] * ((x[i] - mean) * inv_std); }, sum_g, sum_g_xhat);
}

// One pass over the row; the wanted outputs are template flags so each variant is a plain loop.
template <bool kDx, bool kBias, typename C>
[[gnu::always_inline]] inline void layer_norm_grad_pass(const C* dy, const C* x, const C* scale, C* __restrict dx,
                                                        C* __restrict dscale, C* __restrict dbias,
                                                        const LayerNormRow& row) {
  const C mean = static_cast<C>(row.mean), inv_std = static_cast<C>(row.inv_std);
  const C a = static_cast<C>(row.mean_g), b = static_cast<C>(row.mean_g_xhat);
  for (int64_t i = 0; i < row.n; ++i) {
    const C xhat = (x[i] - mean) * inv_std;
    if constexpr (kDx) dx[i] = inv_std * (dy[i] * scale[i] - a - xhat * b);
    dscale[i] += dy[i] * xhat;
    if constexpr (kBias) dbias[i] += dy[i];
  }
}

template <typename C>
[[gnu::always_inline]] inline void layer_norm_grad_row_t(const C* dy, const C* x, const C* scale, C* dx, C* dscale,
                                                         C* dbias, const LayerNormRow& row) {
  if (dx && dbias) layer_norm_grad_pass<true, true>(dy, x, scale, dx, dscale, dbias, row);
  else if (dx) layer_norm_grad_pass<true, false>(dy, x, scale, dx, dscale, dbias, row);
  else if (dbias) layer_norm_grad_pass<false, true>(dy, x, scale, dx, dscale, dbias, row);
  else layer_norm_grad_pass<false, false>(dy, x, scale, dx, dscale, dbias, row);
}

}  // namespace

TRAINRT_SIMD_CLONES float row_dot(const float* a, const float* b, int64_t n) { return row_dot_t(a, b, n); }
TRAINRT_SIMD_CLONES double row_dot(const double* a, const double* b, int64_t n) { return row_dot_t(a, b, n); }

TRAINRT_SIMD_CLONES void cols_add_prod(float* acc, const float* a, const float* b, int64_t rows, int64_t stride,
                                       int64_t n) {
  cols_add_prod_t(acc, a, b, rows, stride, n);
}
TRAINRT_SIMD_CLONES void cols_add_prod(double* acc, const double* a, const double* b, int64_t rows, int64_t stride,
                                       int64_t n) {
  cols_add_prod_t(acc, a, b, rows, stride, n);
}

// ---- Softmax and log-softmax ----

TRAINRT_SIMD_CLONES void softmax_grad_row(const float* dy, const float* y, float* dx, float s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s);
}
TRAINRT_SIMD_CLONES void softmax_grad_row(const double* dy, const double* y, double* dx, double s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s);
}
TRAINRT_SIMD_CLONES void softmax_grad_cols(const float* dy, const float* y, float* dx, const float* s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s[j]);
}
TRAINRT_SIMD_CLONES void softmax_grad_cols(const double* dy, const double* y, double* dx, const double* s,
                                           int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s[j]);
}
TRAINRT_SIMD_CLONES void log_softmax_grad_row(const float* dy, const float* y, float* dx, float s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = dy[j] - exp_of(y[j]) * s;
}
TRAINRT_SIMD_CLONES void log_softmax_grad_row(const double* dy, const double* y, double* dx, double s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = dy[j] - exp_of(y[j]) * s;
}
TRAINRT_SIMD_CLONES void log_softmax_grad_cols(const float* dy, const float* y, float* dx, const float* s,
                                               int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = dy[j] - exp_of(y[j]) * s[j];
}
TRAINRT_SIMD_CLONES void log_softmax_grad_cols(const double* dy, const double* y, double* dx, const double* s,
                                               int64_t n) {
  for (int64_t j = 0; j < n; ++j) dx[j] = dy[j] - exp_of(y[j]) * s[j];
}

// ---- Layer normalization ----

TRAINRT_SIMD_CLONES void layer_norm_grad_sums(const float* dy, const float* x, const float* scale, int64_t n,
                                              float mean, float inv_std, float& sum_g, float& sum_g_xhat) {
  layer_norm_grad_sums_t(dy, x, scale, n, mean, inv_std, sum_g, sum_g_xhat);
}
TRAINRT_SIMD_CLONES void layer_norm_grad_sums(const double* dy, const double* x, const double* scale, int64_t n,
                                              double mean, double inv_std, double& sum_g, double& sum_g_xhat) {
  layer_norm_grad_sums_t(dy, x, scale, n, mean, inv_std, sum_g, sum_g_xhat);
}
TRAINRT_SIMD_CLONES void layer_norm_grad_row(const float* dy, const float* x, const float* scale, float* dx,
                                             float* dscale, float* dbias, const LayerNormRow& row) {
  layer_norm_grad_row_t(dy, x, scale, dx, dscale, dbias, row);
}
TRAINRT_SIMD_CLONES void layer_norm_grad_row(const double* dy, const double* x, const double* scale, double* dx,
                                             double* dscale, double* dbias, const LayerNormRow& row) {
  layer_norm_grad_row_t(dy, x, scale, dx, dscale, dbias, row);
}

// ---- Softmax cross-entropy ----

TRAINRT_SIMD_CLONES void exp_scale(const float* x, float* y, float s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j]) * s;
}
TRAINRT_SIMD_CLONES void exp_scale(const double* x, double* y, double s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j]) * s;
}
TRAINRT_SIMD_CLONES void exp_scale_cols(const float* x, float* y, const float* s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j]) * s[j];
}
TRAINRT_SIMD_CLONES void exp_scale_cols(const double* x, double* y, const double* s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = exp_of(x[j]) * s[j];
}

}  // namespace trainrt
