// Vectorized leaf loops of the optimizers: one contiguous run of n f32 elements per call.
//
// sgd_step / adam_step / lamb_step (sgd.h, adam.h, lamb.h) fold hyperparameters, step count and gradient scale into a
// coefficient struct once per parameter and call these on the pieces a MultiTensorPlan hands out.
// Each loop reads and writes every element once (Adam: read p, g, m, v; write p, m, v), so a step
// costs one pass over memory. They are compiled for AVX-512, AVX2 and baseline x86-64
// (TRAINRT_SIMD_CLONES); the arrays must not overlap.
//
//   AdamCoefficients c = ...;                      // see adam.cc
//   adam_update(p, g, m, v, n, c);                 // p, g, m, v: (n)
#pragma once

#include <cstdint>

namespace trainrt {

// torch.optim.SGD's update written with coefficients (per element, g scaled first):
//   g   = g * grad_scale + weight_decay * p
//   buf = buf_keep * buf + buf_take * g           (first step: 0 * 0 + 1 * g = g exactly)
//   d   = d_grad * g + d_buf * buf                (nesterov: 1, momentum; else 0, 1)
//   p   = p - lr * d
struct SgdCoefficients {
  float grad_scale;  // clip coefficient; negated for maximize
  float weight_decay;
  float lr;
  float buf_keep;
  float buf_take;
  float d_grad;
  float d_buf;
};
// Momentum 0: p = p - lr * (g * grad_scale + weight_decay * p); no buffer.
void sgd_update(float* p, const float* g, int64_t n, const SgdCoefficients& c);
void sgd_momentum_update(float* p, const float* g, float* buf, int64_t n, const SgdCoefficients& c);

// Adam in the three weight-decay conventions (adam.h) written with coefficients:
//   g  = g * grad_scale + l2 * p
//   p  = p * pre_decay
//   m  = m + beta1_weight * (g - m)              (torch: exp_avg.lerp_(g, 1 - beta1))
//   v  = beta2 * v + one_minus_beta2 * g * g
//   vm = max(vm, v)                              (amsgrad only; the denominator uses vm)
//   p  = p + neg_step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
//   p  = p + post_decay * p
struct AdamCoefficients {
  float grad_scale;
  float l2;
  float pre_decay;
  float beta1_weight;
  float beta2;
  float one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;
  float post_decay;
};
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c);
void adam_amsgrad_update(float* p, const float* g, float* m, float* v, float* v_max, int64_t n,
                         const AdamCoefficients& c);

// LAMB (lamb.h) written with coefficients, in two leaves over the same elements:
//   lamb_moments:  g = g * grad_scale + l2 * p;  m = beta1 m + beta1_weight g;
//                  v = beta2 v + one_minus_beta2 g^2
//   u = (m / bias_correction1) / (sqrt(v / bias_correction2) + eps) + decoupled * p
//   lamb_norms:    param_sq += sum p^2, update_sq += sum u^2 (in double)
//   lamb_apply:    p = p + neg_step * u              (neg_step = -lr * trust ratio)
struct LambCoefficients {
  float grad_scale;
  float l2;
  float beta1;
  float beta1_weight;
  float beta2;
  float one_minus_beta2;
  float bias_correction1;
  float bias_correction2;
  float eps;
  float decoupled;
};
struct LambSums {
  double param_sq = 0;
  double update_sq = 0;
};
void lamb_moments(const float* p, const float* g, float* m, float* v, int64_t n, const LambCoefficients& c);
LambSums lamb_norms(const float* p, const float* m, const float* v, int64_t n, const LambCoefficients& c);
void lamb_apply(float* p, const float* m, const float* v, int64_t n, const LambCoefficients& c, float neg_step);

// sum x[i]^2 accumulated in double (each square is exact in double).
double sum_squares(const float* x, int64_t n);
// x = x * s.
void scale_in_place(float* x, int64_t n, float s);
// acc = acc + x.
void add_in_place(float* acc, const float* x, int64_t n);

}  // namespace trainrt
