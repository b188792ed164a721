#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;

TEST(GatherElementsKernel, PicksAlongEachAxisWithNegativeIndices) {
  Tensor data = make_tensor<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor idx = make_tensor<int64_t>({2, 3}, {1, 2, 0, 2, 0, -3});
  auto axis0 = run_node("GatherElements", {data, idx}, {{"axis", Attribute::of_int(0)}});
  expect_close(axis0[0], make_tensor<float>({2, 3}, {4, 8, 3, 7, 2, 3}));
  Tensor idx1 = make_tensor<int32_t>({3, 2}, {0, 0, 1, 0, -1, 1});
  auto axis1 = run_node("GatherElements", {data, idx1}, {{"axis", Attribute::of_int(-1)}});
  expect_close(axis1[0], make_tensor<float>({3, 2}, {1, 1, 5, 4, 9, 8}));
}

TEST(GatherElementsKernel, OutOfRangeIndexIsAShapeErrorNamingTheNode) {
  Tensor data = make_tensor<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_THROW(run_node("GatherElements", {data, make_tensor<int64_t>({1, 2}, {0, 2})}), ShapeError);
}

}  // namespace
}  // namespace trainrt
