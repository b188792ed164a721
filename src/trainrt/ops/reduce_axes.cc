#include "trainrt/ops/reduce_axes.h"

#include "trainrt/core/error.h"

namespace trainrt {

ReduceAxes ReduceAxes::of(const Node& node) {
  ReduceAxes r;
  r.node_ = node.describe();
  r.has_attr_ = node.has_attr("axes");
  r.attr_axes_ = node.attr_ints("axes", {});
  r.noop_with_empty_axes_ = node.attr_int("noop_with_empty_axes", 0) != 0;
  return r;
}

std::vector<bool> ReduceAxes::mask(const Tensor* axes_input, int64_t rank) const {
  std::vector<int64_t> axes = attr_axes_;
  if (axes_input) {
    if (has_attr_) throw ShapeError(fmt(node_, ": axes are given both as attribute and as input 1"));
    if (axes_input->dtype() != DType::kI64 || axes_input->rank() > 1)
      throw ShapeError(fmt(node_, ": input 1 (axes) is ", describe(*axes_input), ", expected a 1-D i64 tensor"));
    axes = axes_input->to_i64_vector();
  }
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty() && !noop_with_empty_axes_);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) throw ShapeError(fmt(node_, ": axis ", a, " is out of range for rank ", rank));
    const size_t i = static_cast<size_t>(a < 0 ? a + rank : a);
    if (mask[i]) throw ShapeError(fmt(node_, ": axis ", a, " is repeated in axes"));
    mask[i] = true;
  }
  return mask;
}

}  // namespace trainrt
