// Vectorized leaf loops of the reduction family's gradient kernels (SoftmaxGrad, LogSoftmaxGrad,
// LayerNormalizationGrad, SoftmaxCrossEntropyLossGrad); the forward loops are in reduce_math.h.
//
// Every function comes in float and double; the float ones are the fast path and are compiled
// for AVX-512, AVX2 and baseline x86-64 (TRAINRT_SIMD_CLONES). The layouts are reduce_math.h's:
//   row_*, *_row   one contiguous row of n elements (the reduced axis is innermost).
//   cols_*, *_cols n contiguous columns of one row of a (reduce, n) block, or folds of `rows`
//                  rows `stride` apart into an accumulator of n values.
// Sums accumulate in independent float lanes and add their blocks into a double, like
// reduce_math.h's, so a long row loses no more than a short one.
//
//   float s = row_dot(dy, y, n);                 // sum dy * y over a row of Softmax's output
//   softmax_grad_row(dy, y, dx, s, n);           // dx = y * (dy - s)
#pragma once

#include <cstdint>

namespace trainrt {

// ---- Row reductions ----
float row_dot(const float* a, const float* b, int64_t n);  // sum a * b
double row_dot(const double* a, const double* b, int64_t n);

// ---- Column folds: acc[j] += sum over r < rows of a[r * stride + j] * b[r * stride + j] ----
void cols_add_prod(float* acc, const float* a, const float* b, int64_t rows, int64_t stride, int64_t n);
void cols_add_prod(double* acc, const double* a, const double* b, int64_t rows, int64_t stride, int64_t n);

// ---- Softmax and log-softmax backward (dx may alias dy) ----
// dx = y * (dy - s), s = sum dy * y along the softmax axis.
void softmax_grad_row(const float* dy, const float* y, float* dx, float s, int64_t n);
void softmax_grad_row(const double* dy, const double* y, double* dx, double s, int64_t n);
void softmax_grad_cols(const float* dy, const float* y, float* dx, const float* s, int64_t n);
void softmax_grad_cols(const double* dy, const double* y, double* dx, const double* s, int64_t n);
// dx = dy - exp(y) * s, s = sum dy along the axis (y = log_softmax(x), so exp(y) is softmax(x)).
void log_softmax_grad_row(const float* dy, const float* y, float* dx, float s, int64_t n);
void log_softmax_grad_row(const double* dy, const double* y, double* dx, double s, int64_t n);
void log_softmax_grad_cols(const float* dy, const float* y, float* dx, const float* s, int64_t n);
void log_softmax_grad_cols(const double* dy, const double* y, double* dx, const double* s, int64_t n);

// ---- Layer normalization backward of one row, xhat = (x - mean) * inv_std, g = dy * scale ----
// The two row sums the backward needs: sum g and sum g * xhat.
void layer_norm_grad_sums(const float* dy, const float* x, const float* scale, int64_t n, float mean,
                          float inv_std, float& sum_g, float& sum_g_xhat);
void layer_norm_grad_sums(const double* dy, const double* x, const double* scale, int64_t n, double mean,
                          double inv_std, double& sum_g, double& sum_g_xhat);
// dx = inv_std * (g - mean_g - xhat * mean_g_xhat); also dscale += dy * xhat and, when dbias is
// not null, dbias += dy (the row's share of the column sums). dx is null when not wanted.
struct LayerNormRow {
  int64_t n;
  double mean, inv_std, mean_g, mean_g_xhat;
};
void layer_norm_grad_row(const float* dy, const float* x, const float* scale, float* dx, float* dscale,
                         float* dbias, const LayerNormRow& row);
void layer_norm_grad_row(const double* dy, const double* x, const double* scale, double* dx, double* dscale,
                         double* dbias, const LayerNormRow& row);

// ---- Softmax cross-entropy backward: y = exp(x) * s (x = log_prob), and y[j] = exp(x[j]) * s[j] ----
void exp_scale(const float* x, float* y, float s, int64_t n);
void exp_scale(const double* x, double* y, double s, int64_t n);
void exp_scale_cols(const float* x, float* y, const float* s, int64_t n);
void exp_scale_cols(const double* x, double* y, const double* s, int64_t n);

}  // namespace trainrt
