// Where each pooling window lies: the window arithmetic of MaxPool, AveragePool and the global
// pools, shared by their shape inference, forward kernels and gradient kernels.
//
// X is (N, C, d1, ..., dk) with k spatial dims. Output position o along spatial dim i reads the
// input positions start + j * dilation for j in [0, kernel), start = o * stride - pad_begin;
// positions outside [0, d) are padding (ONNX operator spec "MaxPool", PyTorch MaxPool2d docs):
//   explicit pads   out = floor_or_ceil((d + pad_begin + pad_end - dilation * (kernel - 1) - 1)
//                         / stride) + 1, and with ceil_mode a last window that would start in the
//                         end padding is dropped (PyTorch pooling_output_shape)
//   SAME_UPPER/LOWER out = ceil(d / stride); total pad = max(0, (out - 1) * stride + window - d)
//                         split evenly, the odd one at the end (UPPER) or the beginning (LOWER)
//   VALID            out = ceil((d - window + 1) / stride), no pads
// The global pools (and a gradient op without kernel_shape) take the whole spatial extent as one
// window: out = 1.
//
//   const PoolAttributes a = PoolAttributes::of(node);          // throws ShapeError naming node
//   const PoolGeometry g = a.geometry(node.describe(), {2, 3, 32, 32});  // g.out {16, 16}: k 2, s 2
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

// The resolved windows of one pooling over concrete dims.
struct PoolGeometry {
  int64_t planes = 1;  // N * C
  // Per spatial dim, in order:
  std::vector<int64_t> in, out, kernel, stride, dilation, pad_begin, pad_end;
  int64_t in_plane() const;   // d1 * ... * dk
  int64_t out_plane() const;  // o1 * ... * ok
};

// A pooling node's attributes, read and checked once.
struct PoolAttributes {
  bool global = false;  // GlobalAveragePool, GlobalMaxPool, or a TrainRT gradient op without kernel_shape
  std::vector<int64_t> kernel, strides, dilations, pads;  // strides, dilations, pads may be empty
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;

  // Reads MaxPool / AveragePool (and their gradient ops') attributes; throws ShapeError naming the
  // node when they are inconsistent (missing kernel_shape, lengths, non-positive kernel, stride or
  // dilation, negative pads, an unknown auto_pad).
  static PoolAttributes of(const Node& node);
  // The output extent of spatial dim i for input extent d (d >= 0).
  int64_t output_size(int64_t i, int64_t d) const;
  // The whole geometry for X of dims x_dims; throws ShapeError naming the node (its description)
  // when X is not
  // (N, C, d1, ..., dk) with k == kernel rank or a window fits nowhere.
  PoolGeometry geometry(const std::string& node, const std::vector<int64_t>& x_dims) const;

 private:
  int64_t window(int64_t i) const { return dilation(i) * (kernel[i] - 1) + 1; }
  int64_t stride(int64_t i) const { return strides.empty() ? 1 : strides[i]; }
  int64_t dilation(int64_t i) const { return dilations.empty() ? 1 : dilations[i]; }
  // (pad_begin, pad_end) of dim i for input extent d.
  std::pair<int64_t, int64_t> padding(int64_t i, int64_t d) const;
};

}  // namespace trainrt
