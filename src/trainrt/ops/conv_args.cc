#include "trainrt/ops/conv_args.h"

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {
namespace {

AutoPad parse_auto_pad(const Node& node) {
  const std::string s = node.attr_string("auto_pad", "NOTSET");
  if (s == "NOTSET") return AutoPad::kNotSet;
  if (s == "VALID") return AutoPad::kValid;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  throw ShapeError(fmt(node.describe(), ": auto_pad '", s, "' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER"));
}

// The attribute `name` with `count` values, each >= `min` (default: `count` copies of `fallback`).
std::vector<int64_t> per_axis(const Node& node, const std::string& name, size_t count, int64_t fallback,
                              int64_t min) {
  std::vector<int64_t> v = node.attr_ints(name, std::vector<int64_t>(count, fallback));
  if (v.size() != count)
    throw ShapeError(fmt(node.describe(), ": attribute ", name, " has ", v.size(), " values ", to_string(v),
                         ", expected ", count));
  for (int64_t e : v)
    if (e < min)
      throw ShapeError(fmt(node.describe(), ": attribute ", name, " ", to_string(v), " has a value below ", min));
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

ConvParams conv_params(const Node& node, int64_t spatial_rank) {
  const size_t k = static_cast<size_t>(spatial_rank);
  ConvParams p;
  p.auto_pad = parse_auto_pad(node);
  p.group = node.attr_int("group", 1);
  if (p.group < 1) throw ShapeError(fmt(node.describe(), ": group ", p.group, " must be at least 1"));
  p.strides = per_axis(node, "strides", k, 1, 1);
  p.dilations = per_axis(node, "dilations", k, 1, 1);
  p.pads = per_axis(node, "pads", 2 * k, 0, 0);
  if (node.has_attr("kernel_shape")) p.kernel_shape = per_axis(node, "kernel_shape", k, 1, 1);
  return p;
}

ConvAxis conv_axis(const std::string& where, const ConvParams& p, size_t axis, int64_t in, int64_t kernel) {
  const int64_t s = p.strides[axis];
  const int64_t dilated = (kernel - 1) * p.dilations[axis] + 1;
  ConvAxis a;
  if (p.auto_pad == AutoPad::kSameUpper || p.auto_pad == AutoPad::kSameLower) {
    a.out = ceil_div(in, s);
    const int64_t total = std::max<int64_t>(0, (a.out - 1) * s + dilated - in);
    a.pad_begin = p.auto_pad == AutoPad::kSameUpper ? total / 2 : total - total / 2;
    a.pad_end = total - a.pad_begin;
    return a;
  }
  if (p.auto_pad == AutoPad::kNotSet) {
    a.pad_begin = p.pads[axis];
    a.pad_end = p.pads[axis + p.strides.size()];
  }
  const int64_t padded = in + a.pad_begin + a.pad_end;
  if (padded < dilated)
    throw ShapeError(fmt(where, ": spatial axis ", axis, " of input 0 has size ", in, " (", padded,
                         " padded), smaller than the dilated kernel's ", dilated, " (kernel ", kernel,
                         ", dilation ", p.dilations[axis], ")"));
  a.out = (padded - dilated) / s + 1;
  return a;
}

std::vector<int64_t> conv_output_dims(const std::string& where, const ConvParams& p, const std::vector<int64_t>& x,
                                      const std::vector<int64_t>& w) {
  const size_t k = p.strides.size();
  if (x.size() != k + 2)
    throw ShapeError(fmt(where, ": input 0 (X) has shape ", to_string(x), ", expected rank ", k + 2,
                         " (N, C, ", k, " spatial dims)"));
  if (w.size() != k + 2)
    throw ShapeError(fmt(where, ": input 1 (W) has shape ", to_string(w), ", expected rank ", k + 2,
                         " (M, C / group, ", k, " kernel dims) like input 0 of shape ", to_string(x)));
  const int64_t m = w[0], c = x[1], c_per_group = w[1];
  if (c >= 0 && c_per_group >= 0 && c != c_per_group * p.group)
    throw ShapeError(fmt(where, ": input 0 (X) of shape ", to_string(x), " has ", c, " channels, but input 1 (W) of ",
                         "shape ", to_string(w), " with group ", p.group, " expects ", c_per_group * p.group,
                         " (W's dim 1 times group)"));
  if (m >= 0 && m % p.group != 0)
    throw ShapeError(fmt(where, ": input 1 (W) of shape ", to_string(w), " has ", m,
                         " output channels, not a multiple of group ", p.group));
  std::vector<int64_t> y{x[0], m};
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x[i + 2];
    int64_t kernel = w[i + 2];
    if (kernel < 0 && !p.kernel_shape.empty()) kernel = p.kernel_shape[i];
    if (!p.kernel_shape.empty() && kernel != p.kernel_shape[i])
      throw ShapeError(fmt(where, ": attribute kernel_shape ", to_string(p.kernel_shape),
                           " does not match input 1 (W) of shape ", to_string(w)));
    y.push_back(in < 0 || kernel < 0 ? -1 : conv_axis(where, p, i, in, kernel).out);
  }
  return y;
}

}  // namespace trainrt
