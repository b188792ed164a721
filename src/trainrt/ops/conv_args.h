// ONNX Conv argument semantics that the Conv and ConvGrad schemas (output dims) and their CPU
// kernels (the padding oneDNN is given) both need, so inference and kernels always agree.
//
// Conv (ONNX Conv-11 and Conv-22, which differ only in the types they list): X (N, C, D1, ..., Dk),
// W (M, C / group, K1, ..., Kk), optional B (M) -> Y (N, M, O1, ..., Ok) for k = 1, 2 or 3.
// Attributes: strides, dilations (default 1 per axis), pads (begins then ends, default 0), group
// (default 1), kernel_shape (W's spatial dims when given), auto_pad. Per spatial axis, with the
// dilated kernel E = (K - 1) * d + 1 (ONNX Conv spec, "auto_pad" and "pads"):
//   NOTSET:     O = floor((D + pad_begin + pad_end - E) / s) + 1
//   VALID:      no padding, O = floor((D - E) / s) + 1
//   SAME_UPPER: O = ceil(D / s), total = max(0, (O - 1) * s + E - D), pad_begin = total / 2
//   SAME_LOWER: the same, but the odd pixel goes first: pad_begin = total - total / 2
//
//   ConvParams p = conv_params(node, /*spatial_rank=*/2);
//   ConvAxis a = conv_axis(node.describe(), p, /*axis=*/0, /*in=*/32, /*kernel=*/3);  // {1, 1, 32}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

// A Conv node's attributes checked against the spatial rank, defaults filled in.
struct ConvParams {
  AutoPad auto_pad = AutoPad::kNotSet;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations;  // (k) each
  std::vector<int64_t> pads;                // (2k): begins then ends; used with NOTSET only
  std::vector<int64_t> kernel_shape;        // (k), or empty when the attribute is absent
};

// Throws ShapeError naming the node on attributes of the wrong length, non-positive strides,
// dilations or group, negative pads or an unknown auto_pad.
ConvParams conv_params(const Node& node, int64_t spatial_rank);

// One spatial axis of a convolution: the padding applied and the output size.
struct ConvAxis {
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
  int64_t out = 0;
};

// Resolves spatial axis `axis` for input size `in` and kernel size `kernel`. Throws ShapeError
// prefixed with `where` when the padded input is smaller than the dilated kernel.
ConvAxis conv_axis(const std::string& where, const ConvParams& p, size_t axis, int64_t in, int64_t kernel);

// Checks X's and W's dims against each other and the params (ranks, channels, group, kernel_shape)
// and returns Y's dims. A dim of -1 is not known (a symbolic dim at plan time): checks that need
// it are skipped and the output dims that depend on it are -1 too. The schema and the kernels
// both call it, so a model is rejected at plan time whenever its shapes allow.
std::vector<int64_t> conv_output_dims(const std::string& where, const ConvParams& p, const std::vector<int64_t>& x,
                                      const std::vector<int64_t>& w);

}  // namespace trainrt
