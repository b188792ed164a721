#include "trainrt/ops/resize_args.h"

#include <algorithm>
#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

template <typename E>
E pick(const Node& node, const char* attr, const std::string& fallback,
       std::initializer_list<std::pair<const char*, E>> choices) {
  const std::string value = node.attr_string(attr, fallback);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    names += names.empty() ? name : std::string(", ") + name;
  }
  throw UnsupportedOp(fmt(node.describe(), ": ", attr, " '", value, "' is not one of ", names));
}

bool legacy_form(const Node& node) {
  return node.op_type() == "Upsample" || (node.op_type() == "Resize" && opset_below(node, 11));
}

std::vector<double> values_of(const Tensor* t) {
  std::vector<double> out;
  if (!t || !t->defined()) return out;
  for (int64_t i = 0; i < t->numel(); ++i) out.push_back(t->to_double(i));
  return out;
}

}  // namespace

ResizeArgs resize_args(const Node& node) {
  ResizeArgs a;
  a.mode = pick<ResizeMode>(node, "mode", "nearest",
                            {{"nearest", ResizeMode::kNearest}, {"linear", ResizeMode::kLinear},
                             {"bilinear", ResizeMode::kLinear}, {"cubic", ResizeMode::kCubic}});
  if (legacy_form(node)) {
    a.coordinates = ResizeCoordinates::kAsymmetric;
    a.nearest = NearestRounding::kFloor;
    a.roi_input = a.sizes_input = -1;
    a.scales_input = node.has_attr("scales") ? -1 : 1;
    a.scales_attr = node.attr_floats("scales", {});
    if (a.mode == ResizeMode::kCubic) throw UnsupportedOp(fmt(node.describe(), ": mode 'cubic' needs Resize-11"));
    return a;
  }
  a.scales_attr = node.attr_floats("scales", {});  // ResizeGrad of an Upsample-7
  using C = ResizeCoordinates;
  a.coordinates = pick<C>(node, "coordinate_transformation_mode", "half_pixel",
                          {{"half_pixel", C::kHalfPixel}, {"half_pixel_symmetric", C::kHalfPixelSymmetric},
                           {"pytorch_half_pixel", C::kPytorchHalfPixel}, {"align_corners", C::kAlignCorners},
                           {"asymmetric", C::kAsymmetric}, {"tf_crop_and_resize", C::kTfCropAndResize}});
  using N = NearestRounding;
  a.nearest = pick<N>(node, "nearest_mode", "round_prefer_floor",
                      {{"round_prefer_floor", N::kRoundPreferFloor}, {"round_prefer_ceil", N::kRoundPreferCeil},
                       {"floor", N::kFloor}, {"ceil", N::kCeil}});
  using P = AspectPolicy;
  a.aspect = pick<P>(node, "keep_aspect_ratio_policy", "stretch",
                     {{"stretch", P::kStretch}, {"not_larger", P::kNotLarger}, {"not_smaller", P::kNotSmaller}});
  a.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a.extrapolation_value = node.attr_float("extrapolation_value", 0.f);
  a.antialias = node.attr_int("antialias", 0) != 0;
  a.axes = node.attr_ints("axes", {});
  if (a.antialias && a.mode == ResizeMode::kNearest)
    throw UnsupportedOp(fmt(node.describe(), ": antialias applies to linear and cubic, not nearest"));
  if (node.op_type() == "ResizeGrad") {  // (dY, dims(X), roi, scales, sizes)
    a.roi_input = 2, a.scales_input = 3, a.sizes_input = 4;
  }
  return a;
}

std::vector<ResizeAxis> resize_axes(const std::string& where, const ResizeArgs& args, const std::vector<int64_t>& in,
                                    const Tensor* roi, const Tensor* scales, const Tensor* sizes) {
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  for (int64_t axis : args.axes) {
    if (axis < -r || axis >= r) throw ShapeError(fmt(where, ": axis ", axis, " is out of range for rank ", r));
    axis = axis < 0 ? axis + r : axis;
    if (std::find(axes.begin(), axes.end(), axis) != axes.end())
      throw ShapeError(fmt(where, ": axis ", axis, " is given twice"));
    axes.push_back(axis);
  }
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  const size_t k = axes.size();

  std::vector<double> scale_values = values_of(scales), size_values = values_of(sizes), roi_values = values_of(roi);
  if (scale_values.empty())
    for (float s : args.scales_attr) scale_values.push_back(s);
  if (scale_values.empty() == size_values.empty())
    throw ShapeError(fmt(where, scale_values.empty() ? ": neither scales nor sizes is given"
                                                     : ": scales and sizes are both given (one of them, please)"));
  const std::vector<double>& given = scale_values.empty() ? size_values : scale_values;
  if (given.size() != k)
    throw ShapeError(fmt(where, ": ", scale_values.empty() ? "sizes" : "scales", " has ", given.size(),
                         " values, expected ", k, args.axes.empty() ? " (the input's rank)" : " (one per axis)"));
  const bool crop = args.coordinates == ResizeCoordinates::kTfCropAndResize;
  if (crop && roi_values.size() != 2 * k)
    throw ShapeError(fmt(where, ": tf_crop_and_resize needs roi of ", 2 * k, " values (starts, then ends), got ",
                         roi_values.size()));

  std::vector<ResizeAxis> out(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) out[static_cast<size_t>(d)].in = out[static_cast<size_t>(d)].out = in[static_cast<size_t>(d)];
  // keep_aspect_ratio_policy: one scale for every resized axis, the smallest or largest of sizes / in.
  double aspect_scale = args.aspect == AspectPolicy::kNotLarger ? INFINITY : 0.0;
  bool aspect_known = true;
  if (!size_values.empty() && args.aspect != AspectPolicy::kStretch) {
    for (size_t i = 0; i < k; ++i) {
      const int64_t n = in[static_cast<size_t>(axes[i])];
      if (n <= 0) {
        aspect_known = false;
        continue;
      }
      const double s = size_values[i] / static_cast<double>(n);
      aspect_scale = args.aspect == AspectPolicy::kNotLarger ? std::min(aspect_scale, s) : std::max(aspect_scale, s);
    }
  }
  for (size_t i = 0; i < k; ++i) {
    ResizeAxis& a = out[static_cast<size_t>(axes[i])];
    if (crop) a.roi_start = roi_values[i], a.roi_end = roi_values[i + k];
    const double v = given[i];
    if (!std::isfinite(v) || v < 0)
      throw ShapeError(fmt(where, ": ", scale_values.empty() ? "size " : "scale ", v, " for axis ", axes[i],
                           " is not a non-negative number"));
    if (!scale_values.empty()) {
      if (v == 0) throw ShapeError(fmt(where, ": scale 0 for axis ", axes[i]));
      a.scale = v;
      // An output of the input's size needs no pass unless the crop moves it.
      a.resized = v != 1.0 || (crop && (a.roi_start != 0.0 || a.roi_end != 1.0));
      if (a.resized) a.out = a.in < 0 ? -1 : static_cast<int64_t>(std::floor(v * static_cast<double>(a.in)));
      continue;
    }
    a.resized = true;
    if (args.aspect == AspectPolicy::kStretch) {
      a.out = static_cast<int64_t>(v);
      a.scale = a.in > 0 ? v / static_cast<double>(a.in) : 1.0;
    } else if (aspect_known && a.in > 0) {
      a.scale = aspect_scale;
      a.out = static_cast<int64_t>(std::floor(aspect_scale * static_cast<double>(a.in) + 0.5));
    } else {
      a.out = -1;
    }
    if (a.in == 0 && a.out > 0) throw ShapeError(fmt(where, ": axis ", axes[i], " of size 0 cannot grow to ", a.out));
    if (a.in >= 0 && a.out == a.in && a.scale == 1.0 && !crop) a.resized = false;
  }
  return out;
}

}  // namespace trainrt
