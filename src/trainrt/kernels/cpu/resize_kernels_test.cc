// Resize beyond the ONNX node tests (which cover the modes and coordinate maps on f32): nearest on
// integer and bool data, 16-bit floats against f32, results independent of the thread count, empty
// batches, and the refusal of linear on integers.
#include <gtest/gtest.h>

#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/core/thread_budget.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::make_tensor;

Tensor scales(std::vector<float> v) { return make_tensor<float>({static_cast<int64_t>(v.size())}, v); }
Attribute str(const char* s) { return Attribute::of_string(s); }

TEST(ResizeKernels, NearestMovesIntegerAndBoolElements) {
  const Tensor x = make_tensor<int64_t>({1, 2, 2}, {1, 2, 3, 4});
  auto y = run_node("Resize", {x, Tensor(), scales({1, 1, 2})}, {{"coordinate_transformation_mode", str("asymmetric")},
                                                               {"nearest_mode", str("floor")}});
  EXPECT_EQ(y[0].dims(), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(y[0].to_i64_vector(), (std::vector<int64_t>{1, 1, 2, 2, 3, 3, 4, 4}));
  const Tensor b = make_tensor<bool>({2, 1}, {true, false});
  y = run_node("Resize", {b, Tensor(), Tensor(), Tensor::from_i64({3, 2})});
  EXPECT_EQ(y[0].to_i64_vector(), (std::vector<int64_t>{1, 1, 1, 1, 0, 0}));  // half_pixel, round_prefer_floor
}

TEST(ResizeKernels, SixteenBitFloatsMatchF32RoundedOnce) {
  const Tensor x = testing::random_f64({2, 3, 5, 4}, 90);
  Tensor xf = Tensor::empty(DType::kF32, x.dims()), xb = Tensor::empty(DType::kBF16, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    xb.data<BFloat16>()[i].bits = f32_to_bf16(static_cast<float>(x.to_double(i)));
    xf.data<float>()[i] = bf16_to_f32(xb.data<BFloat16>()[i].bits);  // the same values in f32
  }
  for (const char* mode : {"linear", "cubic"}) {
    SCOPED_TRACE(mode);
    const std::map<std::string, Attribute> attrs = {{"mode", str(mode)}};
    const Tensor yf = run_node("Resize", {xf, Tensor(), scales({1, 1, 1.6f, 0.75f})}, attrs)[0];
    const Tensor yb = run_node("Resize", {xb, Tensor(), scales({1, 1, 1.6f, 0.75f})}, attrs)[0];
    ASSERT_EQ(yb.dims(), yf.dims());
    for (int64_t i = 0; i < yf.numel(); ++i)
      ASSERT_EQ(yb.data<BFloat16>()[i].bits, f32_to_bf16(yf.data<float>()[i])) << i;
  }
}

TEST(ResizeKernels, OneThreadAndThePoolGiveTheSameBits) {
  const Tensor x = testing::random_f64({4, 8, 40, 30}, 91);
  Tensor xf = Tensor::empty(DType::kF32, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) xf.data<float>()[i] = static_cast<float>(x.to_double(i));
  const std::map<std::string, Attribute> attrs = {{"mode", str("cubic")}, {"antialias", Attribute::of_int(1)}};
  for (const char* op : {"Resize", "ResizeGrad"}) {
    SCOPED_TRACE(op);
    auto run = [&] {
      if (std::string(op) == "Resize") return run_node("Resize", {xf, Tensor(), scales({1, 1, 0.45f, 1.3f})}, attrs)[0];
      NodeSpec spec{.op = "ResizeGrad", .attrs = attrs, .domain = std::string(kTrainrtDomain)};
      const Tensor dy = run_node("Resize", {xf, Tensor(), scales({1, 1, 0.45f, 1.3f})}, attrs)[0];
      return run_node(spec, {dy, Tensor::from_i64(xf.dims()), Tensor(), scales({1, 1, 0.45f, 1.3f})},
                      cpu_kernel_table())[0];
    };
    set_thread_budget(1);
    const Tensor serial = run();
    set_thread_budget(0);
    const Tensor pooled = run();
    ASSERT_EQ(serial.dims(), pooled.dims());
    EXPECT_EQ(std::memcmp(serial.raw(), pooled.raw(), serial.nbytes()), 0);
  }
}

TEST(ResizeKernels, EmptyBatchAndLinearOnIntegers) {
  const Tensor empty = Tensor::zeros(DType::kF32, {0, 2, 3, 3});
  auto y = run_node("Resize", {empty, Tensor(), scales({1, 1, 2, 2})}, {{"mode", str("linear")}});
  EXPECT_EQ(y[0].dims(), (std::vector<int64_t>{0, 2, 6, 6}));
  EXPECT_THROW(run_node("Resize", {make_tensor<int64_t>({1, 2}, {1, 2}), Tensor(), scales({1, 2})},
                        {{"mode", str("linear")}}),
               Error);
}

}  // namespace
}  // namespace trainrt
