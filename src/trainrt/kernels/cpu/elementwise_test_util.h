// Test helpers for the elementwise kernels (header-only, tests only): tensors of any dtype from
// doubles, random inputs, and references computed in double with broadcasting done by index
// arithmetic (independent of BroadcastPlan).
//
//   Tensor a = random_of(DType::kF32, {4, 3}, /*seed=*/1);
//   Tensor b = random_of(DType::kF32, {3}, 2);
//   Tensor want = reference(DType::kF32, {&a, &b}, [](const double* v) { return v[0] + v[1]; });
//   expect_close(run_node("Add", {a, b})[0], want, 1e-6, 1e-7);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "trainrt/core/shape.h"
#include "trainrt/core/tensor.h"

namespace trainrt::testing {

inline constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
inline constexpr DType kIntDTypes[] = {DType::kI64, DType::kI32, DType::kI8, DType::kU8};

// Element i of the result holds values[i] converted to dtype (floats round to nearest even,
// integers truncate, bool is != 0).
inline Tensor from_doubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, std::move(dims));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  visit_dtype(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      if constexpr (std::is_same_v<T, Half>) p[i] = Half{f32_to_f16(static_cast<float>(v))};
      else if constexpr (std::is_same_v<T, BFloat16>) p[i] = BFloat16{f32_to_bf16(static_cast<float>(v))};
      else if constexpr (std::is_same_v<T, bool>) p[i] = v != 0;
      else if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(static_cast<int64_t>(v));
      else p[i] = static_cast<T>(v);
    }
  });
  return t;
}

// Random values of dtype: uniform in [lo, hi) for floats, integers in [lo, hi], fair bools.
inline Tensor random_of(DType dtype, std::vector<int64_t> dims, uint32_t seed, double lo = -3, double hi = 3) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(numel_of(dims)));
  for (double& x : v) {
    if (is_floating(dtype)) x = std::uniform_real_distribution<double>(lo, hi)(rng);
    else if (dtype == DType::kBool) x = static_cast<double>(rng() & 1u);
    else x = static_cast<double>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(lo),
                                                                          static_cast<int64_t>(hi))(rng));
  }
  return from_doubles(dtype, std::move(dims), v);
}

// The expected output of an elementwise op: inputs broadcast to their common dims, f applied to
// each element's input values (as doubles, inputs[k] at v[k]), the result converted to dtype.
inline Tensor reference(DType dtype, const std::vector<const Tensor*>& inputs,
                        const std::function<double(const double*)>& f) {
  std::vector<int64_t> dims;
  for (const Tensor* t : inputs) dims = broadcast_dims(dims, t->dims());
  const int64_t n = numel_of(dims);
  std::vector<double> out(static_cast<size_t>(n));
  std::vector<double> v(inputs.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::vector<int64_t>& in = inputs[k]->dims();
      // Unravel i over dims, right-aligned with the input's dims; broadcast dims read index 0.
      int64_t rest = i, offset = 0, stride = 1;
      for (size_t d = dims.size(); d-- > 0;) {
        const int64_t idx = rest % dims[d];
        rest /= dims[d];
        const size_t back = dims.size() - 1 - d;
        if (back >= in.size()) continue;
        const int64_t size = in[in.size() - 1 - back];
        offset += (size == 1 ? 0 : idx) * stride;
        stride *= size;
      }
      v[k] = inputs[k]->to_double(offset);
    }
    out[static_cast<size_t>(i)] = f(v.data());
  }
  return from_doubles(dtype, dims, out);
}

// Relative tolerance of a float dtype's rounding (a couple of ulp), 0 for exact types.
inline double dtype_rtol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 2e-6;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1.6e-2;
    case DType::kF64: return 1e-12;
    default: return 0;
  }
}

}  // namespace trainrt::testing
