#include "trainrt/core/dtype_convert.h"

#include <bit>

namespace trainrt {
namespace {

// The loops below move 16-bit lanes, which fill a 512-bit vector only with AVX-512 BW:
// TRAINRT_SIMD_CLONES' "avx512f" clone runs them at half width, about 2.5x slower on Zen 5. The
// x86-64-v4 clone (F, BW, DQ, VL) is safe here because the loops call only always_inline helpers:
// a clone with another arch does not inline ordinary functions (which is why TRAINRT_SIMD_CLONES
// itself stays on "avx512f"). Their only float arithmetic (one multiply, or one add) leaves
// nothing to contract into an FMA, so every clone gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINRT_CONVERT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TRAINRT_CONVERT_CLONES
#endif

// cond ? a : b on integers as a mask blend, so that the arms are always computed and the loop
// stays branch-free (an FP operation feeding one arm would otherwise be sunk into a branch).
[[gnu::always_inline]] inline uint32_t select_u32(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

// IEEE half -> float, exact. Normal and denormal halves are moved into a float's bit positions
// and rebiased by a multiply with 2^112; inf and NaN keep an all-ones exponent.
// (F. Giesen, "half_to_float_fast", https://gist.github.com/rygorous/2144712)
[[gnu::always_inline]] inline float half_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t finite = std::bit_cast<uint32_t>(std::bit_cast<float>(em << 13) * 0x1p112f);
  return std::bit_cast<float>(select_u32(em >= 0x7c00u, (em << 13) | 0x7f800000u, finite) | sign);
}

// float -> IEEE half, round to nearest even; overflow gives inf, NaN stays NaN (quiet).
// (F. Giesen, "float_to_half_fast3_rtne", https://gist.github.com/rygorous/2156668)
[[gnu::always_inline]] inline uint16_t f32_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  const uint32_t inf_nan = select_u32(x > 0x7f800000u, 0x7e00u, 0x7c00u);
  // Results below 2^-14 are half denormals: adding 0.5 makes the FPU round the mantissa in place.
  const uint32_t denormal = std::bit_cast<uint32_t>(std::bit_cast<float>(x) + 0.5f) - 0x3f000000u;
  const uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;  // rebias, round half even
  const uint32_t finite = select_u32(x < 0x38800000u, denormal, normal);
  return static_cast<uint16_t>(select_u32(x >= 0x47800000u, inf_nan, finite) | (sign >> 16));
}

[[gnu::always_inline]] inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(select_u32((u & 0x7fffffffu) > 0x7f800000u, (u >> 16) | 0x40u, rounded));
}

TRAINRT_CONVERT_CLONES void half_to_f32_loop(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = half_bits_to_f32(x[i]);
}
TRAINRT_CONVERT_CLONES void f32_to_half_loop(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_half_bits(x[i]);
}
TRAINRT_CONVERT_CLONES void bf16_to_f32_loop(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
}
TRAINRT_CONVERT_CLONES void f32_to_bf16_loop(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16_bits(x[i]);
}

}  // namespace

// Half and BFloat16 are standard-layout wrappers of one uint16_t, so arrays of them are arrays of
// their bit patterns.
void convert_to_f32(const Half* x, float* y, int64_t n) {
  half_to_f32_loop(reinterpret_cast<const uint16_t*>(x), y, n);
}
void convert_to_f32(const BFloat16* x, float* y, int64_t n) {
  bf16_to_f32_loop(reinterpret_cast<const uint16_t*>(x), y, n);
}
void convert_from_f32(const float* x, Half* y, int64_t n) {
  f32_to_half_loop(x, reinterpret_cast<uint16_t*>(y), n);
}
void convert_from_f32(const float* x, BFloat16* y, int64_t n) {
  f32_to_bf16_loop(x, reinterpret_cast<uint16_t*>(y), n);
}

}  // namespace trainrt
