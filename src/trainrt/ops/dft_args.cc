#include "trainrt/ops/dft_args.h"

#include "trainrt/core/error.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {

namespace {
bool is_grad(const Node& node) { return node.op_type() == "DFTGrad"; }
}  // namespace

int dft_axis_input(const Node& node) {
  if (is_grad(node)) return 3;
  return opset_below(node, 20) ? -1 : 2;
}

int dft_length_input(const Node& node) { return is_grad(node) ? 2 : 1; }

DftArgs dft_args(const Node& node, int64_t rank, const Tensor* axis_value) {
  DftArgs a;
  a.inverse = node.attr_int("inverse", 0) != 0;
  a.onesided = node.attr_int("onesided", 0) != 0;
  int64_t axis = is_grad(node) || !opset_below(node, 20) ? node.attr_int("axis", -2) : node.attr_int("axis", 1);
  if (dft_axis_input(node) >= 0 && axis_value && axis_value->defined()) {
    if (axis_value->numel() != 1)
      throw ShapeError(fmt(node.describe(), ": axis (input ", dft_axis_input(node), ") has ", axis_value->numel(),
                           " values, expected 1"));
    axis = axis_value->to_i64(0);
  }
  if (rank < 2) throw ShapeError(fmt(node.describe(), ": input 0 has rank ", rank, ", expected at least 2 (..., 1 or 2)"));
  const int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized > rank - 2)
    throw ShapeError(fmt(node.describe(), ": axis ", axis, " is out of range for input 0 of rank ", rank,
                         " (the last dim holds the real and imaginary parts)"));
  a.axis = normalized;
  return a;
}

}  // namespace trainrt
