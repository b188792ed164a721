// Resize's gradient (ResizeGrad, the transpose of its interpolation) against f64 finite differences,
// over its modes, coordinate maps, antialias, exclude_outside, crops, axes, sizes and the older
// Upsample form; and ResizeGrad's shape check.
#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::make_tensor;
using testing::random_f64;
using testing::WorstErrors;

Attribute str(const char* s) { return Attribute::of_string(s); }
Tensor scales(std::vector<float> v) { return make_tensor<float>({static_cast<int64_t>(v.size())}, v); }

TEST(ResizeGradients, EveryModeMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({1, 2, 4, 5}, 80);
  const Tensor none;
  struct Case {
    const char* mode;
    const char* coordinates;
    std::vector<float> scales;
  };
  for (const Case& c : std::vector<Case>{{"nearest", "asymmetric", {1, 1, 2, 2}},
                                         {"nearest", "half_pixel", {1, 1, 0.6f, 1.7f}},
                                         {"linear", "half_pixel", {1, 1, 2, 1.5f}},
                                         {"linear", "align_corners", {1, 1, 0.5f, 3}},
                                         {"linear", "pytorch_half_pixel", {1, 1, 1.3f, 0.8f}},
                                         {"linear", "half_pixel_symmetric", {1, 1, 1.7f, 0.7f}},
                                         {"cubic", "half_pixel", {1, 1, 2, 1.4f}},
                                         {"cubic", "asymmetric", {1, 1, 0.75f, 2}}}) {
    SCOPED_TRACE(std::string(c.mode) + " " + c.coordinates);
    worst.check({.op = "Resize", .attrs = {{"mode", str(c.mode)}, {"coordinate_transformation_mode", str(c.coordinates)}}},
                {x, none, scales(c.scales)});
  }
  // Antialiased downscales (wider kernels, normalized), with and without the excluded outside.
  for (const char* mode : {"linear", "cubic"})
    for (int64_t exclude : {0, 1}) {
      SCOPED_TRACE(std::string(mode) + " antialias exclude_outside=" + std::to_string(exclude));
      worst.check({.op = "Resize",
                   .attrs = {{"mode", str(mode)}, {"antialias", Attribute::of_int(1)},
                             {"exclude_outside", Attribute::of_int(exclude)}}},
                  {x, none, scales({1, 1, 0.5f, 0.6f})});
    }
}

TEST(ResizeGradients, SizesAxesCropsAndUpsampleMatchFiniteDifferences) {
  WorstErrors worst;
  const Tensor x = random_f64({2, 3, 4}, 81);
  const Tensor none;
  // sizes over axes 1 and 2 (opset 18), keeping the aspect ratio.
  worst.check({.op = "Resize", .attrs = {{"mode", str("linear")}, {"axes", Attribute::of_ints({1, 2})},
                                         {"keep_aspect_ratio_policy", str("not_larger")}}},
              {x, none, none, Tensor::from_i64({5, 7})});
  // tf_crop_and_resize: positions outside the crop read nothing and get no gradient.
  worst.check({.op = "Resize", .attrs = {{"mode", str("linear")}, {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                                         {"extrapolation_value", Attribute::of_float(2.f)}}},
              {x, make_tensor<float>({6}, {0, -0.2f, 0.1f, 1, 1.3f, 0.9f}), none, Tensor::from_i64({2, 5, 6})});
  // Upsample-9: (X, scales), nearest by repeat.
  worst.check({.op = "Upsample", .attrs = {{"mode", str("nearest")}}, .opset = 9}, {x, scales({1, 2, 3})});
  worst.check({.op = "Upsample", .attrs = {{"mode", str("linear")}}, .opset = 9}, {x, scales({1, 1.5f, 2})});
}

TEST(ResizeGradients, ResizeGradRefusesAGradientOfTheWrongShape) {
  const Tensor dy = random_f64({1, 1, 3, 3}, 82);
  NodeSpec spec{.op = "ResizeGrad", .attrs = {{"mode", str("nearest")}}, .domain = std::string(kTrainrtDomain)};
  try {
    run_node(spec, {dy, Tensor::from_i64({1, 1, 2, 2}), Tensor(), scales({1, 1, 2, 2})}, cpu_kernel_table());
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("makes (1, 1, 4, 4)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
