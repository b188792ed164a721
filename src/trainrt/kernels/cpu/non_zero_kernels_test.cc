// NonZero beyond the ONNX node test: row-major coordinates of floats (NaN counts, -0 does not),
// bools and integers, a 1-D input, none found, and the output sized from the values at plan time.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;

TEST(NonZeroKernels, CoordinatesInRowMajorOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto y = run_node("NonZero", {make_tensor<float>({2, 3}, {0, 1.5f, -0.f, nan, 0, -2})})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.to_i64_vector(), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));  // (0,1), (1,0), (1,2)
  y = run_node("NonZero", {make_tensor<bool>({4}, {false, true, true, false})})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(y.to_i64_vector(), (std::vector<int64_t>{1, 2}));
  y = run_node("NonZero", {make_tensor<int64_t>({2, 2}, {0, 0, 0, 0})})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 0}));
}

}  // namespace
}  // namespace trainrt
