// ArgMax / ArgMin beyond the ONNX node tests: NaN wins as in torch, ties pick the first or last
// index, negative axes, bf16 input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;

std::vector<int64_t> run(const std::string& op, const Tensor& x, std::map<std::string, Attribute> attrs) {
  return run_node(op, {x}, attrs)[0].to_i64_vector();
}

TEST(ArgReduceKernels, TiesNanAxesAndDtypes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = make_tensor<float>({2, 4}, {1, 3, 3, 0, 2, nan, 5, -1});
  EXPECT_EQ(run("ArgMax", x, {{"axis", Attribute::of_int(-1)}, {"keepdims", Attribute::of_int(0)}}),
            (std::vector<int64_t>{1, 1}));  // first of the tied 3s; the NaN
  EXPECT_EQ(run("ArgMax", x, {{"axis", Attribute::of_int(1)}, {"select_last_index", Attribute::of_int(1)}}),
            (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(run("ArgMin", x, {{"axis", Attribute::of_int(1)}}), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(run("ArgMin", x, {{"axis", Attribute::of_int(0)}}), (std::vector<int64_t>{0, 1, 0, 1}));
  Tensor b = Tensor::empty(DType::kBF16, {3});
  for (int i = 0; i < 3; ++i) b.data<BFloat16>()[i].bits = f32_to_bf16(std::vector<float>{0.5f, 2.f, -1.f}[i]);
  EXPECT_EQ(run("ArgMax", b, {}), (std::vector<int64_t>{1}));
}

}  // namespace
}  // namespace trainrt
