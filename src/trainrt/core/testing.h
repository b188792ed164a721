// Test helpers shared by every layer's GoogleTest files (header-only, tests only).
//
//   Tensor a = make_tensor<float>({2, 2}, {1, 2, 3, 4});
//   expect_close(run_node("Relu", {a})[0], expected, /*rtol=*/1e-6, /*atol=*/1e-7);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"

namespace trainrt::testing {

template <typename T>
Tensor make_tensor(std::vector<int64_t> dims, const std::vector<T>& values) {
  Tensor t = Tensor::empty(dtype_of<T>(), std::move(dims));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  if (!values.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < values.size(); ++i) t.data<bool>()[i] = values[i];
    } else {
      std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
    }
  }
  return t;
}

// Uniform random f32 tensor in [lo, hi), deterministic for a seed.
inline Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(DType::kF32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// An f32 tensor rounded to bf16 (nearest even): bf16 operands for the mixed-precision kernels.
inline Tensor to_bf16(const Tensor& f32) {
  Tensor out = Tensor::empty(DType::kBF16, f32.dims());
  for (int64_t i = 0; i < f32.numel(); ++i) out.data<BFloat16>()[i] = BFloat16{f32_to_bf16(f32.data<float>()[i])};
  return out;
}

// Same dtype, same dims, and |a - b| <= atol + rtol * |b| elementwise (NaNs must match).
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5,
                         double atol = 1e-6) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << describe(actual) << " vs " << describe(expected);
  ASSERT_EQ(actual.dims(), expected.dims()) << describe(actual) << " vs " << describe(expected);
  int reported = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.to_double(i), b = expected.to_double(i);
    bool ok = (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) <= atol + rtol * std::abs(b);
    if (!ok && reported++ < 5) ADD_FAILURE() << "element " << i << ": got " << a << ", expected " << b;
  }
}

// `actual` elementwise against double-precision reference values (NaNs must match), naming `what`
// and the first few mismatching elements.
inline void expect_values(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol,
                          const std::string& what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  int reported = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = actual.to_double(i), b = expected[static_cast<size_t>(i)];
    const bool ok = (std::isnan(a) && std::isnan(b)) || a == b || std::abs(a - b) <= atol + rtol * std::abs(b);
    if (!ok && reported++ < 3) ADD_FAILURE() << what << " element " << i << ": got " << a << ", expected " << b;
  }
}

}  // namespace trainrt::testing
