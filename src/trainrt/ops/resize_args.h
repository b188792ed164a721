// Resize's (ONNX opset 10/11/13/18/19) and Upsample's (opset 7/9) arguments, read once for both the
// schema (output dims) and the CPU kernels (interpolation taps), so the two always agree.
//
//   Resize(X, [roi], [scales], [sizes]) (opset >= 11); Resize-10 and Upsample-9: (X, scales);
//   Upsample-7: X with a `scales` attribute. Attributes: mode nearest | linear | cubic,
//   coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
//   extrapolation_value, antialias, axes, keep_aspect_ratio_policy (onnx.ai/onnx/operators, Resize).
//   ResizeGrad (com.trainrt) takes (dY, dims(X), [roi], [scales], [sizes]) and the same attributes.
//
//   ResizeArgs a = resize_args(node);                      // throws naming the node and attribute
//   auto axes = resize_axes(node.describe(), a, {1, 3, 4, 4}, roi, scales, sizes);
//   axes[2].out == 8, axes[2].scale == 2.0                 // scales (1, 1, 2, 2)
//
// The older forms read with the semantics their opsets define: Upsample and Resize-10 map output
// pixel o to o / scale (asymmetric), nearest taking the floor, as Upsample's integer-scale repeat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

enum class ResizeMode { kNearest, kLinear, kCubic };
enum class ResizeCoordinates { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric,
                               kTfCropAndResize };
enum class NearestRounding { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
enum class AspectPolicy { kStretch, kNotLarger, kNotSmaller };

struct ResizeArgs {
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoordinates coordinates = ResizeCoordinates::kHalfPixel;
  NearestRounding nearest = NearestRounding::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation_value = 0.0;
  bool antialias = false;
  AspectPolicy aspect = AspectPolicy::kStretch;
  std::vector<int64_t> axes;  // as the node gives them (may be negative); empty: every axis
  // Where roi, scales and sizes come from: input positions, -1 where this form has none.
  int roi_input = 1, scales_input = 2, sizes_input = 3;
  std::vector<float> scales_attr;  // Upsample-7's attribute
};

// Throws InvalidModel / UnsupportedOp naming the node for an unknown mode or attribute value.
ResizeArgs resize_args(const Node& node);

// One axis of the input: its size in and out, the scale (out / in) the coordinate formulas use
// (the given scale, or out / in when sizes were given) and its roi (tf_crop_and_resize).
struct ResizeAxis {
  int64_t in = 0, out = 0;  // -1: not known (plan time, a dynamic dim)
  double scale = 1.0;
  double roi_start = 0.0, roi_end = 1.0;
  bool resized = false;  // false: the output along this axis is the input
};

// The axes of an input of dims `in` (-1 for a dim not known yet) from the values of roi, scales
// and sizes (null or empty: absent). Exactly one of scales and sizes must be given. Throws
// ShapeError prefixed with `where` for lengths that do not fit the rank or the axes.
std::vector<ResizeAxis> resize_axes(const std::string& where, const ResizeArgs& args, const std::vector<int64_t>& in,
                                    const Tensor* roi, const Tensor* scales, const Tensor* sizes);

}  // namespace trainrt
