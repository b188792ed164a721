// Portable vectorization: hot loops are written as plain C++ and compiled several times.
//
// TRAINRT_SIMD_CLONES makes GCC build an AVX-512, an AVX2 and a baseline x86-64 version of a
// function and pick one at load time from the CPU it runs on (function multiversioning), so one
// binary runs everywhere and uses AVX-512 where the CPU has it. Keep such functions small, with
// simple countable loops the auto-vectorizer understands (`#pragma GCC ivdep` where aliasing is
// the only obstacle).
//
//   TRAINRT_SIMD_CLONES void add_f32(const float* a, const float* b, float* y, int64_t n) {
//     for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
//   }
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINRT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINRT_SIMD_CLONES
#endif
