#include "trainrt/ops/tensor_op_args.h"

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {

void normalize_slice_args(const std::string& where, SliceArgs& args, int64_t rank) {
  const size_t n = args.starts.size();
  if (args.ends.size() != n)
    throw ShapeError(fmt(where, ": starts has ", n, " values but ends has ", args.ends.size()));
  if (args.axes.empty()) {
    for (size_t i = 0; i < n; ++i) args.axes.push_back(static_cast<int64_t>(i));
  } else if (args.axes.size() != n) {
    throw ShapeError(fmt(where, ": starts has ", n, " values but axes has ", args.axes.size()));
  }
  if (args.steps.empty()) args.steps.assign(n, 1);
  if (args.steps.size() != n)
    throw ShapeError(fmt(where, ": starts has ", n, " values but steps has ", args.steps.size()));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < n; ++i) {
    int64_t a = args.axes[i];
    if (a < -rank || a >= rank)
      throw ShapeError(fmt(where, ": axis ", a, " is out of range for input rank ", rank));
    a = a < 0 ? a + rank : a;
    if (seen[static_cast<size_t>(a)])
      throw ShapeError(fmt(where, ": axis ", a, " is sliced twice"));
    seen[static_cast<size_t>(a)] = true;
    args.axes[i] = a;
    if (args.steps[i] == 0) throw ShapeError(fmt(where, ": step for axis ", a, " is 0"));
  }
}

SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  // Negative starts/ends count from the back; then positive steps clamp into [0, dim] and
  // negative steps into [-1, dim - 1] (end -1 means "past the first element").
  if (start < 0) start = start < -dim ? -1 : start + dim;
  if (end < 0) end = end < -dim ? -1 : end + dim;
  // |step| in unsigned arithmetic, so INT64_MIN steps do not overflow.
  const uint64_t magnitude = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  SliceAxis s;
  s.step = step;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.start = start;
    if (end > start)
      s.length = 1 + static_cast<int64_t>(static_cast<uint64_t>(end - start - 1) / magnitude);
  } else {
    start = std::clamp<int64_t>(start, -1, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    s.start = start;
    if (start > end)
      s.length = 1 + static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / magnitude);
  }
  if (s.length == 0) s.start = 0;
  if (s.length <= 1) s.step = 1;  // the step of a single element is moot; 1 keeps strides small
  return s;
}

std::vector<int64_t> equal_split_sizes(const std::string& where, int64_t dim, int64_t parts) {
  if (parts <= 0) throw ShapeError(fmt(where, ": cannot split into ", parts, " parts"));
  // ONNX reference (op_split.py): ceil-sized parts, the remainder in the last one.
  const int64_t chunk = (dim + parts - 1) / parts;
  std::vector<int64_t> sizes(static_cast<size_t>(parts), chunk);
  sizes.back() = dim - chunk * (parts - 1);
  if (sizes.back() < 0)
    throw ShapeError(fmt(where, ": cannot split an axis of size ", dim, " into ", parts,
                         " parts of ", chunk));
  return sizes;
}

Tensor constant_value(const Node& node) {
  for (const char* name : {"sparse_value", "value_string", "value_strings"})
    if (node.has_attr(name))
      throw UnsupportedOp(fmt(node.describe(), ": attribute '", name,
                              "' is not supported (no string or sparse tensors)"));
  int given = 0;
  Tensor value;
  if (const Tensor* t = node.attr_tensor("value")) {
    ++given;
    value = *t;
  }
  if (node.has_attr("value_float")) {
    ++given;
    value = Tensor::scalar<float>(node.attr_float("value_float", 0));
  }
  if (node.has_attr("value_int")) {
    ++given;
    value = Tensor::scalar<int64_t>(node.attr_int("value_int", 0));
  }
  if (node.has_attr("value_floats")) {
    ++given;
    std::vector<float> v = node.attr_floats("value_floats", {});
    value = Tensor::empty(DType::kF32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), value.data<float>());
  }
  if (node.has_attr("value_ints")) {
    ++given;
    value = Tensor::from_i64(node.attr_ints("value_ints", {}));
  }
  if (given != 1)
    throw InvalidModel(fmt(node.describe(), ": needs exactly one value attribute, has ", given));
  return value;
}

}  // namespace trainrt
