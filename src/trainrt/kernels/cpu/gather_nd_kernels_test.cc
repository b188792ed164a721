// ScatterND's reductions on f16 / bf16 data (torch's index_put with accumulate in a 16-bit model):
// each update combines in float and is rounded on store, in index order.
#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.to_double(i);
  return v;
}

std::map<std::string, Attribute> reduction(const char* r) { return {{"reduction", Attribute::of_string(r)}}; }

// Distinct index tuples: one combination per element, so the 16-bit result is the f32 kernel's
// result on the same values rounded once, to the bit.
TEST(ScatterNDKernel, SixteenBitReductionsAreTheF32ResultRoundedOnce) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const Tensor data = testing::random_of(t, {4, 3}, 1), updates = testing::random_of(t, {2, 3}, 2);
    const Tensor idx = testing::make_tensor<int64_t>({2, 1}, {2, 0});
    const auto wide = [](const Tensor& x) { return testing::from_doubles(DType::kF32, x.dims(), doubles_of(x)); };
    for (const char* r : {"add", "mul", "max", "min"}) {
      const Tensor got = run_node("ScatterND", {data, idx, updates}, reduction(r))[0];
      ASSERT_EQ(got.dtype(), t);
      const Tensor f32 = run_node("ScatterND", {wide(data), idx, wide(updates)}, reduction(r))[0];
      testing::expect_values(got, doubles_of(testing::from_doubles(t, {4, 3}, doubles_of(f32))), 0, 0,
                             std::string(r) + " " + std::string(dtype_name(t)));
    }
  }
}

// A repeated tuple rounds after each update: 256 + 1 is 256 in bf16 (8 bits of mantissa), and so is
// 256 + 1 + 1, where the f32 sum rounded once would be 258.
TEST(ScatterNDKernel, SixteenBitAddRoundsOnEachStore) {
  const Tensor data = testing::from_doubles(DType::kBF16, {2}, {256, 2});
  const Tensor idx = testing::make_tensor<int64_t>({3, 1}, {0, 0, 1});
  const Tensor updates = testing::from_doubles(DType::kBF16, {3}, {1, 1, 0.5});
  testing::expect_values(run_node("ScatterND", {data, idx, updates}, reduction("add"))[0], {256, 2.5}, 0, 0,
                         "bf16 add");
}

}  // namespace
}  // namespace trainrt
