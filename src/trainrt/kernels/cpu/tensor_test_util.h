// Test helpers for the data movement kernels (header-only, tests only).
//
// A byte-moving kernel is checked against a reference that only says, for each output element,
// which input element it comes from; `pick` turns that into the expected tensor, in any dtype:
//
//   Tensor x = iota(DType::kF16, {2, 3});                 // element i holds i
//   std::vector<int64_t> from;                              // transpose: out[j, i] = x[i, j]
//   for_each_index({3, 2}, [&](const std::vector<int64_t>& o) { from.push_back(o[1] * 3 + o[0]); });
//   expect_same(run_node("Transpose", {x})[0], pick(x, {3, 2}, from));
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "trainrt/core/shape.h"
#include "trainrt/core/tensor.h"

namespace trainrt::testing {

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64,
                                       DType::kI32, DType::kI8,  DType::kU8,   DType::kBool};

// Element i holds i, wrapped where the type cannot hold it exactly (bool: i % 2, 8-bit: i % 127,
// bf16: i % 256, f16: i % 2048).
inline Tensor iota(DType dtype, std::vector<int64_t> dims) {
  Tensor t = Tensor::empty(dtype, std::move(dims));
  visit_dtype(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, Half>) p[i] = Half{f32_to_f16(static_cast<float>(i % 2048))};
      else if constexpr (std::is_same_v<T, BFloat16>)
        p[i] = BFloat16{f32_to_bf16(static_cast<float>(i % 256))};
      else if constexpr (std::is_same_v<T, bool>) p[i] = i % 2 == 1;
      else if constexpr (sizeof(T) == 1) p[i] = static_cast<T>(i % 127);
      else p[i] = static_cast<T>(i);
    }
  });
  return t;
}

// Calls fn(index) for every multi-index of dims in row-major order.
template <typename F>
void for_each_index(const std::vector<int64_t>& dims, F&& fn) {
  if (numel_of(dims) == 0) return;
  std::vector<int64_t> index(dims.size(), 0);
  while (true) {
    fn(static_cast<const std::vector<int64_t>&>(index));
    size_t j = dims.size();
    while (j > 0 && ++index[j - 1] == dims[j - 1]) index[--j] = 0;
    if (j == 0) return;
  }
}

// Row-major flat offset of `index` in contiguous `dims`.
inline int64_t flat_index(const std::vector<int64_t>& dims, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t j = 0; j < dims.size(); ++j) flat = flat * dims[j] + index[j];
  return flat;
}

// The tensor with dims `dims` whose element i is element from[i] of `in` (bytes copied).
inline Tensor pick(const Tensor& in, std::vector<int64_t> dims, const std::vector<int64_t>& from) {
  Tensor out = Tensor::empty(in.dtype(), std::move(dims));
  EXPECT_EQ(static_cast<size_t>(out.numel()), from.size());
  const size_t es = dtype_size(in.dtype());
  auto* dst = static_cast<char*>(out.raw());
  const auto* src = static_cast<const char*>(in.raw());
  for (size_t i = 0; i < from.size(); ++i) std::memcpy(dst + i * es, src + from[i] * es, es);
  return out;
}

// Same dtype, dims and bytes.
inline void expect_same(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << describe(actual) << " vs " << describe(expected);
  ASSERT_EQ(actual.dims(), expected.dims()) << describe(actual) << " vs " << describe(expected);
  const size_t es = dtype_size(actual.dtype());
  const auto* a = static_cast<const char*>(actual.raw());
  const auto* e = static_cast<const char*>(expected.raw());
  int reported = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(a + i * es, e + i * es, es) != 0 && reported++ < 5)
      ADD_FAILURE() << describe(actual) << " element " << i << ": got " << actual.to_double(i)
                    << ", expected " << expected.to_double(i);
  }
}

}  // namespace trainrt::testing
