// Vectorized conversions between arrays of 16-bit floats (IEEE half, bfloat16) and f32.
//
// Use these where a loop computes in f32 on 16-bit storage: widen a block, compute, narrow it back.
// Widening is exact; narrowing rounds to nearest even, overflow gives inf and NaN stays a (quiet)
// NaN, as c10::Half / c10::BFloat16 convert. The loops are compiled for AVX-512, AVX2 and baseline
// x86-64 (TRAINRT_SIMD_CLONES). The scalar conversions are in dtype.h.
//
//   float buf[256];
//   convert_to_f32(x, buf, n);      // x: (n) BFloat16, n <= 256
//   ...                             // f32 math on buf
//   convert_from_f32(buf, x, n);    // rounded back in place
#pragma once

#include <cstdint>

#include "trainrt/core/dtype.h"

namespace trainrt {

void convert_to_f32(const Half* x, float* y, int64_t n);
void convert_to_f32(const BFloat16* x, float* y, int64_t n);
void convert_from_f32(const float* x, Half* y, int64_t n);
void convert_from_f32(const float* x, BFloat16* y, int64_t n);

}  // namespace trainrt
