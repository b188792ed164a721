// ONNX argument semantics of the elementwise ops that both their schemas and their CPU kernels
// need, so inference and kernels agree: Cast's target type and the legacy broadcasting of binary
// ops before opset 7.
//
// Cast's `to` is a TensorProto type code, or a type name ("FLOAT") in Cast-1. Binary ops before
// opset 7 broadcast only with attribute broadcast=1, aligning B's dims with A's from `axis`
// (default: trailing, as numpy); appending trailing 1s to B turns that into numpy broadcasting:
//
//   DType to = cast_target_dtype(node);                  // DType::kBF16 for to=16 or to="BFLOAT16"
//   // Add-6, A (2, 3, 4, 5), B (3, 4), broadcast=1, axis=1: B is read as (3, 4, 1)
//   int64_t ones = legacy_broadcast_trailing_ones(node, 4, 2);  // 1
#pragma once

#include <cstdint>

#include "trainrt/core/dtype.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// The dtype Cast converts to. Throws InvalidModel when `to` is missing or malformed and
// UnsupportedOp for types TrainRT does not have, naming the node.
DType cast_target_dtype(const Node& node);

// How many trailing 1-dims to append to input 1 (rank_b) so that numpy broadcasting against
// input 0 (rank_a) gives the node's legacy axis alignment; 0 from opset 7 on or without `axis`.
// Throws ShapeError naming the node when axis does not fit the ranks.
int64_t legacy_broadcast_trailing_ones(const Node& node, int64_t rank_a, int64_t rank_b);

}  // namespace trainrt
