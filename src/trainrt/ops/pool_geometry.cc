#include "trainrt/ops/pool_geometry.h"

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

int64_t PoolGeometry::in_plane() const {
  int64_t n = 1;
  for (int64_t d : in) n *= d;
  return n;
}

int64_t PoolGeometry::out_plane() const {
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  return n;
}

PoolAttributes PoolAttributes::of(const Node& node) {
  PoolAttributes a;
  const std::string& op = node.op_type();
  a.global = op == "GlobalAveragePool" || op == "GlobalMaxPool" ||
             (node.domain() == kTrainrtDomain && !node.has_attr("kernel_shape"));
  if (a.global) return a;
  a.kernel = node.attr_ints("kernel_shape", {});
  a.strides = node.attr_ints("strides", {});
  a.dilations = node.attr_ints("dilations", {});
  a.pads = node.attr_ints("pads", {});
  a.auto_pad = node.attr_string("auto_pad", "NOTSET");
  a.ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  const size_t k = a.kernel.size();
  const auto bad = [&](const std::string& what) { throw ShapeError(fmt(node.describe(), ": ", what)); };
  if (k == 0) bad("kernel_shape is empty");
  if (!a.strides.empty() && a.strides.size() != k)
    bad(fmt("strides ", to_string(a.strides), " do not match kernel_shape ", to_string(a.kernel)));
  if (!a.dilations.empty() && a.dilations.size() != k)
    bad(fmt("dilations ", to_string(a.dilations), " do not match kernel_shape ", to_string(a.kernel)));
  if (!a.pads.empty() && a.pads.size() != 2 * k)
    bad(fmt("pads ", to_string(a.pads), " must have 2 values per kernel dim of ", to_string(a.kernel)));
  for (size_t i = 0; i < k; ++i) {
    if (a.kernel[i] < 1 || a.stride(i) < 1 || a.dilation(i) < 1)
      bad(fmt("kernel_shape ", to_string(a.kernel), ", strides and dilations must be positive"));
    if (!a.pads.empty() && (a.pads[i] < 0 || a.pads[i + k] < 0)) bad(fmt("pads ", to_string(a.pads), " are negative"));
  }
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" && a.auto_pad != "VALID")
    bad(fmt("auto_pad '", a.auto_pad, "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"));
  return a;
}

std::pair<int64_t, int64_t> PoolAttributes::padding(int64_t i, int64_t d) const {
  const size_t k = kernel.size();
  if (auto_pad == "VALID") return {0, 0};
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t out = (d + stride(i) - 1) / stride(i);
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride(i) + window(i) - d);
    const int64_t small = total / 2;
    return auto_pad == "SAME_UPPER" ? std::pair{small, total - small} : std::pair{total - small, small};
  }
  if (pads.empty()) return {0, 0};
  return {pads[static_cast<size_t>(i)], pads[static_cast<size_t>(i) + k]};
}

int64_t PoolAttributes::output_size(int64_t i, int64_t d) const {
  if (global) return 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return (d + stride(i) - 1) / stride(i);
  const auto [begin, end] = padding(i, d);
  const int64_t span = d + begin + end - window(i);
  // A window longer than the padded input: none, or in ceil mode one clipped window where it is
  // shorter by less than a stride (ceil(span / stride + 1) == 1; torch pools what the window covers).
  if (span < 0) return ceil_mode && auto_pad != "VALID" && span + stride(i) > 0 ? 1 : 0;
  if (auto_pad == "VALID" || !ceil_mode) return span / stride(i) + 1;
  int64_t out = (span + stride(i) - 1) / stride(i) + 1;
  if ((out - 1) * stride(i) >= d + begin) --out;  // the last window would start in the end padding
  return out;
}

PoolGeometry PoolAttributes::geometry(const std::string& node, const std::vector<int64_t>& x_dims) const {
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  if (rank < 3 || (!global && rank != static_cast<int64_t>(kernel.size()) + 2))
    throw ShapeError(fmt(node, ": input 0 has shape ", to_string(x_dims), ", expected (N, C, ",
                         global ? "d1, ..., dk)" : fmt(kernel.size(), " spatial dims) for kernel_shape ",
                                                        to_string(kernel))));
  PoolGeometry g;
  g.planes = x_dims[0] * x_dims[1];
  for (int64_t i = 0; i + 2 < rank; ++i) {
    const int64_t d = x_dims[static_cast<size_t>(i + 2)];
    g.in.push_back(d);
    g.out.push_back(output_size(i, d));
    if (global) {
      g.kernel.push_back(d);
      g.stride.push_back(1);
      g.dilation.push_back(1);
      g.pad_begin.push_back(0);
      g.pad_end.push_back(0);
      continue;
    }
    const auto [begin, end] = padding(i, d);
    if (g.out.back() < 1)
      throw ShapeError(fmt(node, ": the window of kernel_shape ", to_string(kernel),
                           " does not fit input 0 of shape ", to_string(x_dims), " in spatial dim ", i));
    g.kernel.push_back(kernel[static_cast<size_t>(i)]);
    g.stride.push_back(stride(i));
    g.dilation.push_back(dilation(i));
    g.pad_begin.push_back(begin);
    g.pad_end.push_back(end);
  }
  return g;
}

}  // namespace trainrt
