// Which axes a Reduce* node reduces; shared by the Reduce* schemas and their CPU kernels.
//
// Old opsets give the axes as the `axes` attribute; ReduceSum from opset 13 and the other Reduce*
// ops from opset 18 take them as an optional second input (1-D int64). Either way an empty or
// absent list means "every axis", unless noop_with_empty_axes=1, where it means "no axis": the
// op then maps each element on its own (ReduceSum copies, ReduceSumSquare squares), as the ONNX
// reference implementation does.
//
//   ReduceAxes spec = ReduceAxes::of(node);               // reads the attributes once
//   std::vector<bool> mask = spec.mask(&axes_input, 3);   // axes [-1] -> {false, false, true}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

class ReduceAxes {
 public:
  static ReduceAxes of(const Node& node);

  // Which of `rank` axes are reduced. `axes_input` is the value of the node's axes input, or
  // null when it has none. Throws ShapeError naming the node when an axis is out of range or
  // repeated, when the input is not int64 of rank <= 1, or when both attribute and input are given.
  std::vector<bool> mask(const Tensor* axes_input, int64_t rank) const;

 private:
  std::string node_;  // node.describe(), for errors
  bool has_attr_ = false;
  std::vector<int64_t> attr_axes_;
  bool noop_with_empty_axes_ = false;
};

}  // namespace trainrt
