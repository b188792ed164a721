#include "trainrt/optim/optim_math.h"

#include <cmath>

#include "trainrt/core/simd.h"

namespace trainrt {

// Coefficients are copied into locals so the compiler keeps them in registers instead of
// reloading them through the reference on every iteration.

TRAINRT_SIMD_CLONES void sgd_update(float* __restrict p, const float* __restrict g, int64_t n,
                                    const SgdCoefficients& c) {
  const float grad_scale = c.grad_scale, weight_decay = c.weight_decay, neg_lr = -c.lr;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale + weight_decay * p[i];
    p[i] = p[i] + neg_lr * gi;
  }
}

TRAINRT_SIMD_CLONES void sgd_momentum_update(float* __restrict p, const float* __restrict g,
                                             float* __restrict buf, int64_t n, const SgdCoefficients& c) {
  const float grad_scale = c.grad_scale, weight_decay = c.weight_decay, neg_lr = -c.lr;
  const float buf_keep = c.buf_keep, buf_take = c.buf_take, d_grad = c.d_grad, d_buf = c.d_buf;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale + weight_decay * p[i];
    const float bi = buf_keep * buf[i] + buf_take * gi;
    buf[i] = bi;
    p[i] = p[i] + neg_lr * (d_grad * gi + d_buf * bi);
  }
}

namespace {

// The Adam element update shared by both leaves (v_max is read and written only for amsgrad).
// The exact sqrt and the two divisions stay: on GPT-2 small's 124M parameters the step takes the
// time of a loop with its reads and writes and no math (bench/optim/adamw_bench.cc, stream_4r3w),
// so rsqrt + Newton would only cost accuracy. Non-temporal stores and software prefetch measured
// no better (the step is bound by the 28 bytes per element it moves).
template <bool kAmsgrad>
[[gnu::always_inline]] inline void adam_body(float* __restrict p, const float* __restrict g,
                                             float* __restrict m, float* __restrict v,
                                             float* __restrict v_max, int64_t n, const AdamCoefficients& c) {
  const float grad_scale = c.grad_scale, l2 = c.l2, pre_decay = c.pre_decay;
  const float beta1_weight = c.beta1_weight, beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2;
  const float bc2_sqrt = c.bias_correction2_sqrt, eps = c.eps;
  const float neg_step_size = c.neg_step_size, post_decay = c.post_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = g[i] * grad_scale + l2 * pi;
    const float mi = m[i] + beta1_weight * (gi - m[i]);
    const float vi = beta2 * v[i] + one_minus_beta2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    float vd = vi;
    if constexpr (kAmsgrad) {
      vd = v_max[i] > vi ? v_max[i] : vi;
      v_max[i] = vd;
    }
    const float denom = std::sqrt(vd) / bc2_sqrt + eps;
    const float updated = pi * pre_decay + neg_step_size * mi / denom;
    p[i] = updated + post_decay * updated;
  }
}

}  // namespace

TRAINRT_SIMD_CLONES void adam_update(float* p, const float* g, float* m, float* v, int64_t n,
                                     const AdamCoefficients& c) {
  adam_body<false>(p, g, m, v, nullptr, n, c);
}

TRAINRT_SIMD_CLONES void adam_amsgrad_update(float* p, const float* g, float* m, float* v, float* v_max,
                                             int64_t n, const AdamCoefficients& c) {
  adam_body<true>(p, g, m, v, v_max, n, c);
}

namespace {

// LAMB's update direction u for one element, one definition for lamb_norms and lamb_apply.
[[gnu::always_inline]] inline float lamb_update(float p, float m, float v, const LambCoefficients& c) {
  return (m / c.bias_correction1) / (std::sqrt(v / c.bias_correction2) + c.eps) + c.decoupled * p;
}

}  // namespace

TRAINRT_SIMD_CLONES void lamb_moments(const float* __restrict p, const float* __restrict g, float* __restrict m,
                                      float* __restrict v, int64_t n, const LambCoefficients& c) {
  const float grad_scale = c.grad_scale, l2 = c.l2, beta1 = c.beta1, beta1_weight = c.beta1_weight;
  const float beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale + l2 * p[i];
    m[i] = m[i] * beta1 + beta1_weight * gi;
    v[i] = v[i] * beta2 + one_minus_beta2 * gi * gi;
  }
}

TRAINRT_SIMD_CLONES LambSums lamb_norms(const float* __restrict p, const float* __restrict m,
                                        const float* __restrict v, int64_t n, const LambCoefficients& c) {
  const LambCoefficients k = c;
  // Independent double lanes, as in sum_squares, so the loop vectorizes without reassociation.
  constexpr int kLanes = 8;
  double p_acc[kLanes] = {}, u_acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double pj = p[i + j], uj = lamb_update(p[i + j], m[i + j], v[i + j], k);
      p_acc[j] += pj * pj;
      u_acc[j] += uj * uj;
    }
  LambSums sums;
  for (; i < n; ++i) {
    const double pi = p[i], ui = lamb_update(p[i], m[i], v[i], k);
    sums.param_sq += pi * pi;
    sums.update_sq += ui * ui;
  }
  for (int j = 0; j < kLanes; ++j) {
    sums.param_sq += p_acc[j];
    sums.update_sq += u_acc[j];
  }
  return sums;
}

TRAINRT_SIMD_CLONES void lamb_apply(float* __restrict p, const float* __restrict m, const float* __restrict v,
                                    int64_t n, const LambCoefficients& c, float neg_step) {
  const LambCoefficients k = c;
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] + neg_step * lamb_update(p[i], m[i], v[i], k);
}

TRAINRT_SIMD_CLONES double sum_squares(const float* x, int64_t n) {
  // Two 512-bit registers of double lanes: independent chains hide the add latency.
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double xj = x[i + j];
      acc[j] += xj * xj;
    }
  double total = 0;
  for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  return total;
}

TRAINRT_SIMD_CLONES void scale_in_place(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

TRAINRT_SIMD_CLONES void add_in_place(float* __restrict acc, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace trainrt
