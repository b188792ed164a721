// Runs the optimizers' f32 leaf loops (optim_math.h) on parameters stored as f32, f16 or bf16.
//
// A step's math is f32 whatever the storage, as in torch's fused CPU optimizers
// (aten/src/ATen/native/cpu/FusedAdamKernel.cpp, FusedSGDKernel.cpp): 16-bit values are widened
// (exactly), the loop runs in f32, and each array the loop writes is narrowed back once, rounding
// to nearest even. f32 arrays go straight to the loop; 16-bit ones pass through f32 scratch blocks
// small enough to stay in L1, so a step still reads and writes each element once from memory.
//
//   visit_param_dtype(param.dtype(), [&]<typename T>() {             // T: float, Half, BFloat16
//     with_f32_blocks<T>(n, {p, g, m, v}, {true, false, true, true},  // which arrays are written
//                        [&](const std::array<float*, 4>& a, int64_t count) {
//                          adam_update(a[0], a[1], a[2], a[3], count, c);
//                        });
//   });
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "trainrt/core/dtype.h"
#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/error.h"

namespace trainrt {

// Calls fn.template operator()<T>() with the storage type of an optimizer's parameter dtype.
// Callers check the dtype first (check_param_and_grad); another dtype here is a bug.
template <typename Fn>
decltype(auto) visit_param_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kF16: return fn.template operator()<Half>();
    case DType::kBF16: return fn.template operator()<BFloat16>();
    default: TRAINRT_CHECK(false, "optimizer parameter dtype ", dtype_name(t)); __builtin_unreachable();
  }
}

// Elements per scratch block: four arrays of 512 f32 are 8 KiB, well inside L1.
inline constexpr int64_t kF32BlockElements = 512;

// fn(f32 arrays, count) over elements [0, n) of `arrays` (each null or n elements of T). For T =
// float fn runs once on the arrays themselves; otherwise once per block, on f32 copies, with the
// arrays marked in `written` rounded back afterwards. A null array's f32 pointer is not to be read.
template <typename T, size_t N, typename Fn>
void with_f32_blocks(int64_t n, const std::array<T*, N>& arrays, const std::array<bool, N>& written, Fn&& fn) {
  if constexpr (std::is_same_v<T, float>) {
    fn(arrays, n);
  } else {
    alignas(64) float scratch[N][kF32BlockElements];
    std::array<float*, N> f32;
    for (size_t k = 0; k < N; ++k) f32[k] = scratch[k];
    for (int64_t begin = 0; begin < n; begin += kF32BlockElements) {
      const int64_t count = std::min(kF32BlockElements, n - begin);
      for (size_t k = 0; k < N; ++k)
        if (arrays[k]) convert_to_f32(arrays[k] + begin, scratch[k], count);
      fn(f32, count);
      for (size_t k = 0; k < N; ++k)
        if (arrays[k] && written[k]) convert_from_f32(scratch[k], arrays[k] + begin, count);
    }
  }
}

// x = f32(T(x)): the values x takes when stored as T (no-op for float); count <= kF32BlockElements.
template <typename T>
void round_to_storage(float* x, int64_t count) {
  if constexpr (!std::is_same_v<T, float>) {
    T stored[kF32BlockElements];
    convert_from_f32(x, stored, count);
    convert_to_f32(stored, x, count);
  }
}

}  // namespace trainrt
