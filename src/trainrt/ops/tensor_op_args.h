// ONNX argument semantics of the tensor ops that both their schemas (output dims and values) and
// their CPU kernels (offsets and strides) need, so inference and kernels always agree: Slice's
// clamping, Split's part sizes, Constant's value and which opset rules a node follows.
//
// Slice takes starts/ends/axes/steps as inputs (opset >= 10) or as attributes (opset 1, no steps).
// normalize_slice_args checks them against the data rank and fills the defaults; slice_axis then
// clamps one axis as the ONNX spec says (Slice-13, "starts"/"ends" paragraphs):
//
//   SliceArgs a{.starts = {-1}, .ends = {INT64_MIN}, .axes = {0}, .steps = {-1}};
//   normalize_slice_args(node.describe(), a, /*rank=*/1);
//   SliceAxis s = slice_axis(/*dim=*/5, a.starts[0], a.ends[0], a.steps[0]);  // {4, -1, 5}: reversed
//   equal_split_sizes(node.describe(), /*dim=*/7, /*parts=*/4);               // {2, 2, 2, 1}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

struct SliceArgs {
  std::vector<int64_t> starts, ends;
  std::vector<int64_t> axes;   // empty: 0 .. len(starts)-1
  std::vector<int64_t> steps;  // empty: all 1
};

// One sliced axis: element `start + i * step` for i in [0, length).
struct SliceAxis {
  int64_t start = 0;
  int64_t step = 1;
  int64_t length = 0;
};

// Checks lengths, normalizes negative axes into [0, rank), rejects repeated axes and zero steps,
// and fills default axes and steps. Throws ShapeError prefixed with `where` (node.describe()).
void normalize_slice_args(const std::string& where, SliceArgs& args, int64_t rank);

// Clamps start/end into the axis of size `dim` for the direction of `step` (step != 0).
SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step);

// Split's part sizes along an axis of size `dim` into `parts` outputs when no split sizes are
// given: equal parts, or (Split-18 num_outputs) parts of ceil(dim / parts) with a smaller last one.
// Throws ShapeError prefixed with `where` when the last part would be negative.
std::vector<int64_t> equal_split_sizes(const std::string& where, int64_t dim, int64_t parts);

// Whether the node follows an ONNX opset older than `version`. A graph that imports no ONNX opset
// (opset 0, e.g. built in C++) gets the newest semantics rather than the oldest.
inline bool opset_below(const Node& node, int version) {
  const int v = node.opset();
  return v > 0 && v < version;
}

// The value of a Constant node: exactly one of the attributes value, value_float(s), value_int(s).
// String and sparse forms throw UnsupportedOp, a missing or doubled value InvalidModel.
Tensor constant_value(const Node& node);

}  // namespace trainrt
