// Vectorizable single-precision math: exp, log, tanh, erf, sigmoid and friends.
//
// GCC does not vectorize loops that call std::exp / std::tanh / std::erf (they are opaque libm
// calls), so f32 kernels use these instead. Each function is branch-free straight-line code
// (polynomials, bit tricks and selects written as ternaries) that the auto-vectorizer turns into
// AVX-512 / AVX2 code when inlined into a loop compiled with TRAINRT_SIMD_CLONES (core/simd.h).
// Accuracy over the whole float range (vector_math_test.cc): relative error below 3e-7 for exp,
// log, expm1, log1p, tanh, sigmoid, erf; about 1e-6 for erfc (x < 3) and both GELUs (x > -3).
// In the far tails that decay like exp(-x^2) the f32 rounding of x^2 costs up to ~3e-5 relative,
// on results below 1e-4 |x|. IEEE behaviour at the edges: NaN propagates, exp overflows to inf and
// underflows through denormals to 0, log(0) = -inf, log(x < 0) = NaN.
//
// The polynomials are Cephes' single-precision ones (Moshier, "Methods and Programs for
// Mathematical Functions", cephes/single: expf.c, logf.c, tanhf.c, ndtrf.c).
//
//   TRAINRT_SIMD_CLONES void gelu_rows(const float* x, float* y, int64_t n) {
//     for (int64_t i = 0; i < n; ++i) y[i] = gelu_f32(x[i]);
//   }
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

// Forces inlining so the math is vectorized inside the caller's (cloned) loop.
#define TRAINRT_VECTOR_INLINE [[gnu::always_inline]] inline

namespace trainrt {

inline constexpr float kInfF32 = std::numeric_limits<float>::infinity();
inline constexpr float kNanF32 = std::numeric_limits<float>::quiet_NaN();

// cond ? a : b, as a bit blend. A plain ternary whose arms compute something is not if-converted
// under GCC's default -ftrapping-math (the arms are sunk into branches), which blocks
// vectorization for AVX2 and SSE; this form always becomes a blend.
TRAINRT_VECTOR_INLINE float select_f32(bool cond, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) | (std::bit_cast<uint32_t>(b) & ~mask));
}
// |x| (clears the sign bit).
TRAINRT_VECTOR_INLINE float abs_f32(float x) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
}

// floor(x) and ceil(x) through an int32 round trip (std::floor is not vectorized under the default
// -ftrapping-math). |x| >= 2^23 is already integral and NaN / inf pass through; the sign of x is
// or-ed back so that floor(-0) = -0 and ceil(-0.5) = -0.
TRAINRT_VECTOR_INLINE float floor_f32(float x) {
  const bool small = abs_f32(x) < 8388608.f;
  const float t = static_cast<float>(static_cast<int32_t>(select_f32(small, x, 0.f)));  // truncated
  const float r = select_f32(small, select_f32(t > x, t - 1.f, t), x);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
}
TRAINRT_VECTOR_INLINE float ceil_f32(float x) {
  const bool small = abs_f32(x) < 8388608.f;
  const float t = static_cast<float>(static_cast<int32_t>(select_f32(small, x, 0.f)));
  const float r = select_f32(small, select_f32(t < x, t + 1.f, t), x);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
}

// exp(x). Range reduction x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial
// (Cephes expf), then a scale by 2^n built in the exponent bits. 2^n is applied as two factors
// so n in [-150, 128] covers denormal results and overflow to inf.
TRAINRT_VECTOR_INLINE float exp_f32(float x) {
  x = select_f32(x < -104.f, -104.f, x);  // NaN passes through both clamps
  x = select_f32(x > 89.f, 89.f, x);
  // Rounds x / ln2 to the nearest integer: adding 1.5 * 2^23 leaves it in the low mantissa bits.
  constexpr float kRound = 12582912.f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 split in two for accuracy
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(n1 + 127) << 23));
  const float s2 = std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(n2 + 127) << 23));
  return p * s1 * s2;
}

// log(x). x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes logf's polynomial in m - 1.
TRAINRT_VECTOR_INLINE float log_f32(float x) {
  // Denormals are scaled into the normal range first (2^25) and the exponent corrected.
  const bool tiny = x < 1.17549435e-38f;
  const float xs = select_f32(tiny, x * 33554432.f, x);
  const uint32_t bits = std::bit_cast<uint32_t>(xs);
  float e = static_cast<float>(static_cast<int32_t>((bits >> 23) & 0xffu) - 126) - select_f32(tiny, 25.f, 0.f);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = select_f32(low, e - 1.f, e);
  m = select_f32(low, m + m - 1.f, m - 1.f);
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * e;
  r = select_f32(x == kInfF32, kInfF32, r);
  r = select_f32((x < 0.f) | (x != x), kNanF32, r);
  return select_f32(x == 0.f, -kInfF32, r);
}

// exp(x) - 1, accurate near 0 (Taylor series to x^8 for |x| < 0.5, exp(x) - 1 elsewhere).
TRAINRT_VECTOR_INLINE float expm1_f32(float x) {
  float p = 1.f / 40320.f;
  p = p * x + 1.f / 5040.f;
  p = p * x + 1.f / 720.f;
  p = p * x + 1.f / 120.f;
  p = p * x + 1.f / 24.f;
  p = p * x + 1.f / 6.f;
  p = p * x + 0.5f;
  const float small = (p * x) * x + x;
  const float big = exp_f32(x) - 1.f;
  return select_f32((x > -0.5f) & (x < 0.5f), small, big);
}

// log(1 + x) for x > -1, accurate near 0: log(u) corrected by the rounding of u = 1 + x.
TRAINRT_VECTOR_INLINE float log1p_f32(float x) {
  const float u = 1.f + x;
  const float d = u - 1.f;
  const float corrected = log_f32(u) - (d - x) / u;
  return select_f32(d == 0.f, x, corrected);
}

// tanh(x): an odd polynomial for |x| < 0.625 (Cephes tanhf), 1 - 2 / (exp(2|x|) + 1) above.
TRAINRT_VECTOR_INLINE float tanh_f32(float x) {
  const float ax = abs_f32(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = 1.f - 2.f / (exp_f32(2.f * ax) + 1.f);
  return select_f32(ax < 0.625f, small, select_f32(x < 0.f, -big, big));
}

// 1 / (1 + exp(-x)).
TRAINRT_VECTOR_INLINE float sigmoid_f32(float x) { return 1.f / (1.f + exp_f32(-x)); }

// erf(x) for |x| < 1: x T(x^2) (Cephes ndtrf.c).
TRAINRT_VECTOR_INLINE float erf_small_f32(float x) {
  const float z = x * x;
  float p = 7.853861353153693e-5f;
  p = p * z - 8.010193625184903e-4f;
  p = p * z + 5.188327685732524e-3f;
  p = p * z - 2.685381193529856e-2f;
  p = p * z + 1.128358514861418e-1f;
  p = p * z - 3.761262582423300e-1f;
  p = p * z + 1.128379165726710e+0f;
  return x * p;
}

// erfc(|x|) for |x| >= 1: exp(-x^2) / |x| P(1/x^2), with one polynomial on [1, 2) and another
// above (Cephes ndtrf.c). Underflows to 0 past |x| ~ 10.
TRAINRT_VECTOR_INLINE float erfc_large_f32(float x) {
  const float ax = abs_f32(x);
  const float q = 1.f / ax;
  const float y = q * q;
  float p = 2.326819970068386e-2f;
  p = p * y - 1.387039388740657e-1f;
  p = p * y + 3.687424674597105e-1f;
  p = p * y - 5.824733027278666e-1f;
  p = p * y + 6.210004621745983e-1f;
  p = p * y - 4.944515323274145e-1f;
  p = p * y + 3.404879937665872e-1f;
  p = p * y - 2.741127028184656e-1f;
  p = p * y + 5.638259427386472e-1f;
  float r = -1.047766399936249e+1f;
  r = r * y + 1.297719955372516e+1f;
  r = r * y - 7.495518717768503e+0f;
  r = r * y + 2.921019019210786e+0f;
  r = r * y - 1.015265279202700e+0f;
  r = r * y + 4.218463358204948e-1f;
  r = r * y - 2.820767439740514e-1f;
  r = r * y + 5.641895067754075e-1f;
  return exp_f32(-ax * ax) * q * select_f32(ax < 2.f, p, r);
}

TRAINRT_VECTOR_INLINE float erf_f32(float x) {
  const float big = 1.f - erfc_large_f32(x);
  return select_f32(abs_f32(x) < 1.f, erf_small_f32(x), select_f32(x < 0.f, -big, big));
}

// erfc(x) = 1 - erf(x), without cancellation for large positive x.
TRAINRT_VECTOR_INLINE float erfc_f32(float x) {
  const float tail = erfc_large_f32(x);
  return select_f32(abs_f32(x) < 1.f, 1.f - erf_small_f32(x), select_f32(x < 0.f, 2.f - tail, tail));
}

// GELU, exact form: x Phi(x) = 0.5 x erfc(-x / sqrt(2)) (accurate in the negative tail, where
// 1 + erf(x / sqrt(2)) would cancel). ONNX Gelu-20 approximate="none".
TRAINRT_VECTOR_INLINE float gelu_f32(float x) { return 0.5f * x * erfc_f32(x * -0.707106781186547524f); }

// GELU, tanh form: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// ONNX Gelu-20 approximate="tanh".
TRAINRT_VECTOR_INLINE float gelu_tanh_f32(float x) {
  const float u = 0.7978845608028654f * (x + static_cast<float>(0.044715) * x * x * x);
  return x / (1.f + exp_f32(-2.f * u));
}

// d/dx GELU (exact form) times dy: Phi(x) + x phi(x), Phi(x) = erfc(-x / sqrt(2)) / 2 accurate
// for x < 0. The GeluGrad kernel and generated kernels share it (same bits).
TRAINRT_VECTOR_INLINE float gelu_grad_f32(float dy, float x) {
  const float cdf = 0.5f * erfc_f32(x * -static_cast<float>(0.70710678118654752440));
  const float pdf = static_cast<float>(0.39894228040143267794) * exp_f32(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}

// d/dx GELU (tanh form) times dy: s + 0.5 x sech^2(u) u', with e = exp(-2|u|) <= 1 so nothing
// overflows or cancels: sech^2(u) = 4 e / (1 + e)^2, and s = 1 / (1 + e) for u >= 0, e / (1 + e)
// below. Past |x| = 12 the derivative is 1 or 0 to the last bit (and x^3 could overflow).
TRAINRT_VECTOR_INLINE float gelu_tanh_grad_f32(float dy, float x) {
  const bool flat = abs_f32(x) > 12.f;
  const float xc = select_f32(flat, 0.f, x);
  const float u = static_cast<float>(0.79788456080286535588) * (xc + static_cast<float>(0.044715) * xc * xc * xc);
  const float du = static_cast<float>(0.79788456080286535588) * (1.f + 3.f * static_cast<float>(0.044715) * xc * xc);
  const float e = exp_f32(-2.f * abs_f32(u));
  const float r = 1.f / (1.f + e);
  const float d = select_f32(u < 0.f, e * r, r) + 0.5f * xc * (4.f * e * r * r) * du;
  return dy * select_f32(flat, select_f32(x > 0.f, 1.f, 0.f), d);
}

}  // namespace trainrt
