#include "trainrt/ops/reduce_axes.h"

#include "trainrt/core/error.h"

namespace trainrt {

std::vector<bool> reduced_axes_mask(const Node& node, const Tensor* axes, int64_t rank) {
  std::vector<int64_t> list;
  if (axes) {
    if (node.has_attr("axes"))
      throw ShapeError(fmt(node.describe(), ": axes are given both as attribute and as input 1"));
    if (axes->dtype() != DType::kI64 || axes->rank() > 1)
      throw ShapeError(fmt(node.describe(), ": input 1 (axes) is ", describe(*axes),
                           ", expected a 1-D i64 tensor"));
    list = axes->to_i64_vector();
  } else {
    list = node.attr_ints("axes", {});
  }
  const bool noop = node.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> mask(static_cast<size_t>(rank), list.empty() && !noop);
  for (int64_t a : list) {
    if (a < -rank || a >= rank)
      throw ShapeError(fmt(node.describe(), ": axis ", a, " is out of range for rank ", rank));
    size_t i = static_cast<size_t>(a < 0 ? a + rank : a);
    if (mask[i]) throw ShapeError(fmt(node.describe(), ": axis ", a, " is repeated in axes"));
    mask[i] = true;
  }
  return mask;
}

}  // namespace trainrt
