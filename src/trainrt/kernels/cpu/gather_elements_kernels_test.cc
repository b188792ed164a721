#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;

std::vector<Tensor> run_grad(const std::vector<Tensor>& inputs, int64_t axis) {
  NodeSpec spec{.op = "GatherElementsGrad", .attrs = {{"axis", Attribute::of_int(axis)}},
                .domain = std::string(kTrainrtDomain)};
  return run_node(spec, inputs, cpu_kernel_table());
}

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

// dX[idx[i][j]][j] += dY[i][j] for axis 0 (torch.gather's backward, scatter_add): repeated
// indices add up, unread positions stay 0.
TEST(GatherElementsKernel, GradAddsEachGradientWhereItWasReadWithRepeats) {
  Tensor idx = make_tensor<int64_t>({2, 3}, {1, 2, 0, 1, -1, 0});
  Tensor dy = make_tensor<double>({2, 3}, {1, 2, 3, 10, 20, 30});
  auto axis0 = run_grad({Tensor::from_i64({3, 3}), idx, dy}, 0);
  expect_close(axis0[0], make_tensor<double>({3, 3}, {0, 0, 33, 11, 0, 0, 0, 22, 0}));
  Tensor idx1 = make_tensor<int32_t>({2, 2}, {3, 3, 0, -4});  // row 0 twice at column 3; row 1 twice at 0
  Tensor dy1 = make_tensor<float>({2, 2}, {1, 2, 4, 8});
  auto axis1 = run_grad({Tensor::from_i64({2, 4}), idx1, dy1}, -1);
  expect_close(axis1[0], make_tensor<float>({2, 4}, {0, 0, 0, 3, 12, 0, 0, 0}));
  const Tensor out_of_range = make_tensor<int64_t>({1, 2}, {0, 2});  // index 2 on an axis of 2
  EXPECT_THROW(run_grad({Tensor::from_i64({2, 2}), out_of_range, make_tensor<float>({1, 2}, {1, 1})}, 1), ShapeError);
}

// ScatterElements of f16 / bf16 data (a bf16 model's index_add): each update combines in float and
// is rounded on store, in index order, as torch's scatter of those dtypes; values are chosen so
// that rounding shows: 256 + 1 is 256 in bf16 (8 bits of mantissa), and 256 + 1 + 1 still is.
TEST(ScatterElementsKernel, SixteenBitFloatsCombineInFloatAndRoundOnEachStore) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const auto of = [&](std::vector<int64_t> dims, std::vector<double> v) { return testing::from_doubles(t, dims, v); };
    const Tensor data = of({3}, {256, 2, -1});
    const Tensor idx = make_tensor<int64_t>({4}, {0, 0, 1, 2});
    const Tensor updates = of({4}, {1, 1, 0.5, 3});
    const std::vector<double> added = t == DType::kBF16 ? std::vector<double>{256, 2.5, 2} : std::vector<double>{258, 2.5, 2};
    const std::map<std::string, Attribute> add{{"axis", Attribute::of_int(0)}, {"reduction", Attribute::of_string("add")}};
    testing::expect_values(run_node("ScatterElements", {data, idx, updates}, add)[0], added, 0, 0, std::string(dtype_name(t)));
    const std::map<std::string, Attribute> max{{"axis", Attribute::of_int(0)}, {"reduction", Attribute::of_string("max")}};
    testing::expect_values(run_node("ScatterElements", {data, idx, updates}, max)[0], {256, 2, 3}, 0, 0, std::string(dtype_name(t)));
    const std::map<std::string, Attribute> none{{"axis", Attribute::of_int(0)}};
    testing::expect_values(run_node("ScatterElements", {data, make_tensor<int64_t>({2}, {2, 1}), of({2}, {7, -4})}, none)[0],
                           {256, -4, 7}, 0, 0, std::string(dtype_name(t)));
  }
}

}  // namespace
}  // namespace trainrt
