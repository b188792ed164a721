// CumSum against a reference that sums, for each output element, the input elements it covers
// along the axis. Inputs hold small integers, so every dtype's sums are exact and compared bytewise.
#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"

namespace trainrt {
namespace {

using testing::expect_same;
using testing::flat_index;
using testing::for_each_index;

// Element i holds ((i * 7919) % 23) - 11: small signed integers in no order (arithmetic dtypes).
Tensor small_ints(DType t, std::vector<int64_t> dims) {
  Tensor x = Tensor::empty(t, std::move(dims));
  visit_dtype(t, [&]<typename T>() {
    if constexpr (std::is_arithmetic_v<T>)
      for (int64_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = static_cast<T>((i * 7919) % 23 - 11);
  });
  return x;
}

// y[.., i, ..] = sum of x[.., j, ..] over j <= i (j < i exclusive; j >= i, j > i reversed).
Tensor reference_cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  Tensor y = Tensor::zeros(x.dtype(), x.dims());
  if (axis < 0) axis += x.rank();
  const int64_t n = x.dim(axis);
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_arithmetic_v<T>) for_each_index(x.dims(), [&](const std::vector<int64_t>& out) {
      std::vector<int64_t> in = out;
      T sum{0};
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = out[static_cast<size_t>(axis)];
        const bool covered = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
        in[static_cast<size_t>(axis)] = j;
        if (covered) sum += x.data<T>()[flat_index(x.dims(), in)];
      }
      y.data<T>()[flat_index(x.dims(), out)] = sum;
    });
  });
  return y;
}

TEST(CumSumKernel, EveryAxisDirectionAndDTypeEqualsTheReference) {
  for (DType t : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{7}, std::vector<int64_t>{3, 5},
                                             std::vector<int64_t>{2, 1, 9}, std::vector<int64_t>{2, 33, 17}}) {
      const Tensor x = small_ints(t, dims);
      const int64_t rank = static_cast<int64_t>(dims.size());
      for (int64_t axis = -rank; axis < rank; ++axis) {
        for (int64_t exclusive : {0, 1}) {
          for (int64_t reverse : {0, 1}) {
            SCOPED_TRACE(describe(x) + " axis " + std::to_string(axis) + " exclusive " +
                         std::to_string(exclusive) + " reverse " + std::to_string(reverse));
            const std::map<std::string, Attribute> attrs{{"exclusive", Attribute::of_int(exclusive)},
                                                         {"reverse", Attribute::of_int(reverse)}};
            const Tensor a = axis % 2 ? Tensor::scalar<int32_t>(static_cast<int32_t>(axis)) : Tensor::scalar(axis);
            expect_same(run_node("CumSum", {x, a}, attrs)[0], reference_cumsum(x, axis, exclusive, reverse));
          }
        }
      }
    }
  }
}

TEST(CumSumKernel, LongAxisSplitAcrossThreadsAndEmptyTensors) {
  const Tensor long_rows = small_ints(DType::kF32, {64, 1000});  // outer slabs spread over threads
  expect_same(run_node("CumSum", {long_rows, Tensor::scalar<int64_t>(1)})[0],
              reference_cumsum(long_rows, 1, false, false));
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0, 4}, std::vector<int64_t>{4, 0}}) {
    const Tensor empty = small_ints(DType::kI64, dims);
    expect_same(run_node("CumSum", {empty, Tensor::scalar<int64_t>(1)})[0], empty);
  }
}

TEST(CumSumKernel, BadAxisOrDTypeIsAShapeError) {
  const Tensor x = small_ints(DType::kF32, {2, 3});
  EXPECT_THROW(run_node("CumSum", {x, Tensor::scalar<int64_t>(2)}), ShapeError);
  EXPECT_THROW(run_node("CumSum", {x, Tensor::scalar<int64_t>(-3)}), ShapeError);
  EXPECT_THROW(run_node("CumSum", {small_ints(DType::kI8, {2, 3}), Tensor::scalar<int64_t>(0)}), ShapeError);
  EXPECT_THROW(run_node("CumSum", {x, Tensor::from_i64({0, 1})}), ShapeError);
}

}  // namespace
}  // namespace trainrt
