// TopK beyond the ONNX node tests: ties keep the lower index first, NaN counts as the largest (as
// torch), the smallest along a middle axis, and K = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;

TEST(TopKKernels, TiesNanAxesAndZeroK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = make_tensor<float>({2, 4}, {1, 3, 3, 0, 2, nan, 5, -1});
  auto out = run_node("TopK", {x, make_tensor<int64_t>({1}, {2})}, {}, 2);
  EXPECT_EQ(out[1].to_i64_vector(), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_TRUE(std::isnan(out[0].to_double(2)));
  out = run_node("TopK", {x, make_tensor<int64_t>({1}, {3})}, {{"largest", Attribute::of_int(0)}}, 2);
  EXPECT_EQ(out[1].to_i64_vector(), (std::vector<int64_t>{3, 0, 1, 3, 0, 2}));  // NaN last when smallest
  const Tensor y = make_tensor<float>({2, 3, 1}, {4, 1, 2, 0, 9, 9});
  out = run_node("TopK", {y, make_tensor<int64_t>({1}, {1})}, {{"axis", Attribute::of_int(1)}}, 2);
  EXPECT_EQ(out[1].to_i64_vector(), (std::vector<int64_t>{0, 1}));
  out = run_node("TopK", {x, make_tensor<int64_t>({1}, {0})}, {}, 2);
  EXPECT_EQ(out[0].numel(), 0);
}

}  // namespace
}  // namespace trainrt
