// Vectorized leaf loops of the reduction family (Reduce*, Softmax, LayerNormalization, losses).
//
// Every function comes in float and double; the float ones are the fast path and are compiled
// for AVX-512, AVX2 and baseline x86-64 (TRAINRT_SIMD_CLONES). Two layouts cover every
// reduction once a kernel has split its tensor into (outer, reduce, inner):
//   row_*   reduce one contiguous row (inner == 1) to one value.
//   cols_*  fold `rows` rows of a block (rows `stride` apart, n contiguous columns each) into an
//           accumulator of n values: reducing a non-innermost axis reads memory in order, four
//           rows per accumulator update.
// Sums accumulate in independent lanes (the compiler may not reorder a plain `s += x[i]`), and
// float rows add their blocks into a double, so a long row loses no more than a short one.
// Max and min propagate NaN like numpy.
//
//   float m = row_max(x, n);                        // x: (n)
//   float s = row_sum_exp(x, n, m);                 // sum exp(x - m)
//   cols_add(acc, x, reduce, inner, inner);         // acc: (inner) += sum over rows of (reduce, inner)
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace trainrt {

// exp(x) for float within 2 ulp, written so the compiler vectorizes loops that call it: Cody-Waite
// range reduction x = n ln2 + r, the Cephes expf polynomial for e^r, and 2^n built from bits.
// Results below ~1e-38 flush to 0 (they vanish against the 1 that a max-shifted softmax adds).
[[gnu::always_inline]] inline float exp_approx(float x) {
  constexpr float kLo = -86.5f;     // keeps n >= -125, so 2^(n-1) below is a normal float
  constexpr float kHi = 88.72283f;  // log(FLT_MAX)
  const float c = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float n = (c * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(c / ln2)
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const float half_scale = std::bit_cast<float>((static_cast<int32_t>(n) + 126) << 23);  // 2^(n-1)
  float y = p * half_scale * 2.f;
  y = x < kLo ? 0.f : y;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

// ---- Row reductions: one value from x[0, n). ----
float row_sum(const float* x, int64_t n);
double row_sum(const double* x, int64_t n);
float row_sum_abs(const float* x, int64_t n);
double row_sum_abs(const double* x, int64_t n);
float row_sum_sq(const float* x, int64_t n);
double row_sum_sq(const double* x, int64_t n);
float row_prod(const float* x, int64_t n);
double row_prod(const double* x, int64_t n);
float row_max(const float* x, int64_t n);  // -inf for n == 0
double row_max(const double* x, int64_t n);
float row_min(const float* x, int64_t n);  // +inf for n == 0
double row_min(const double* x, int64_t n);
// sum exp(x - shift) and sum (x - mean)^2.
float row_sum_exp(const float* x, int64_t n, float shift);
double row_sum_exp(const double* x, int64_t n, double shift);
float row_sum_sq_dev(const float* x, int64_t n, float mean);
double row_sum_sq_dev(const double* x, int64_t n, double mean);

// ---- Column folds: acc[j] = acc[j] (op) f(x[r * stride + j]) over r < rows, for j < n. ----
void cols_add(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_add(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
void cols_add_abs(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_add_abs(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
void cols_add_sq(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_add_sq(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
void cols_mul(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_mul(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
void cols_max(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_max(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
void cols_min(float* acc, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_min(double* acc, const double* x, int64_t rows, int64_t stride, int64_t n);
// The running (max, sum exp(x - max)) of each column in one pass ("online softmax", Milakov &
// Gimelshein 2018): when the max grows, the sum so far is rescaled by exp(old max - new max).
// Start from max = -inf, sum = 0; log-sum-exp is then max + log(sum).
void cols_max_sum_exp(float* max, float* sum, const float* x, int64_t rows, int64_t stride, int64_t n);
void cols_max_sum_exp(double* max, double* sum, const double* x, int64_t rows, int64_t stride, int64_t n);

// ---- Elementwise steps of softmax and log-softmax (y may alias x). ----
// y = exp(x - shift); returns sum y.
float exp_shift_sum(const float* x, float* y, float shift, int64_t n);
double exp_shift_sum(const double* x, double* y, double shift, int64_t n);
// y = x * s.
void scale(const float* x, float* y, float s, int64_t n);
void scale(const double* x, double* y, double s, int64_t n);
// y[j] = exp(x[j] - shift[j]) * s[j].
void exp_shift_scale_cols(const float* x, float* y, const float* shift, const float* s, int64_t n);
void exp_shift_scale_cols(const double* x, double* y, const double* shift, const double* s, int64_t n);
// y = (x - a) - b, and y[j] = (x[j] - a[j]) - b[j]: log-softmax's x - max - log(sum) in that
// order, so a large max cancels exactly before the small log(sum) is taken away.
void shift(const float* x, float* y, float a, float b, int64_t n);
void shift(const double* x, double* y, double a, double b, int64_t n);
void shift_cols(const float* x, float* y, const float* a, const float* b, int64_t n);
void shift_cols(const double* x, double* y, const double* a, const double* b, int64_t n);

// ---- Layer normalization of one row: y = (x - mean) * inv_std * scale + bias (bias may be null). ----
void normalize_row(const float* x, float* y, int64_t n, float mean, float inv_std, const float* scale,
                   const float* bias);
void normalize_row(const double* x, double* y, int64_t n, double mean, double inv_std, const double* scale,
                   const double* bias);

}  // namespace trainrt
