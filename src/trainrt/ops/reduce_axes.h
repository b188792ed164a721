// Which axes a Reduce* node reduces; shared by the Reduce* schemas and their CPU kernels.
//
// Old opsets give the axes as the `axes` attribute; ReduceSum from opset 13 and the other Reduce*
// ops from opset 18 take them as an optional second input (1-D int64). Either way an empty or
// absent list means "every axis", unless noop_with_empty_axes=1, where it means "no axis": the
// op then maps each element on its own (ReduceSum copies, ReduceSumSquare squares), as the ONNX
// reference implementation does.
//
//   // x: (2, 3, 4), axes input [-1]
//   std::vector<bool> mask = reduced_axes_mask(node, &axes, 3);   // {false, false, true}
#pragma once

#include <cstdint>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// `axes` is the value of the node's axes input, or null when the node has no such input (the
// attribute, if any, is used then). Throws ShapeError naming the node when an axis is out of
// range or repeated, when the axes input is not int64 of rank <= 1, or when both forms are given.
std::vector<bool> reduced_axes_mask(const Node& node, const Tensor* axes, int64_t rank);

}  // namespace trainrt
