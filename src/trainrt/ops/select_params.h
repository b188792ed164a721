// ONNX Slice and Split argument semantics, shared by their schemas (output dims) and CPU kernels
// (offsets and strides), so inference and kernels always agree.
//
// Slice takes starts/ends/axes/steps as inputs (opset >= 10) or as attributes (opset 1, no steps).
// normalize_slice_args checks them against the data rank and fills the defaults; slice_axis then
// clamps one axis as the ONNX spec says (Slice-13, "starts"/"ends" paragraphs):
//
//   SliceArgs a{.starts = {-1}, .ends = {INT64_MIN}, .axes = {0}, .steps = {-1}};
//   normalize_slice_args(node, a, /*rank=*/1);
//   SliceAxis s = slice_axis(/*dim=*/5, a.starts[0], a.ends[0], a.steps[0]);  // {4, -1, 5}: reversed
//   equal_split_sizes(node, /*dim=*/7, /*parts=*/4);                           // {2, 2, 2, 1}
#pragma once

#include <cstdint>
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
// and fills default axes and steps. Throws ShapeError naming the node.
void normalize_slice_args(const Node& node, SliceArgs& args, int64_t rank);

// Clamps start/end into the axis of size `dim` for the direction of `step` (step != 0).
SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step);

// Split's part sizes along an axis of size `dim` into `parts` outputs when no split sizes are
// given: equal parts, or (Split-18 num_outputs) parts of ceil(dim / parts) with a smaller last one.
// Throws ShapeError naming the node when the last part would be negative.
std::vector<int64_t> equal_split_sizes(const Node& node, int64_t dim, int64_t parts);

}  // namespace trainrt
