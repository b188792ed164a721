// DFT's (ONNX opset 17 / 20) arguments, read once for its schema, its kernel and its gradient.
//
//   Y = DFT(X, [dft_length], [axis])   X (..., n, ..., c): c = 1 real, 2 (re, im); Y (..., m, ..., 2)
//   Y[k] = scale * sum_{j < min(n, N)} exp(sign * 2 pi i j k / N) X[j] along `axis`, k in [0, m), where
//   N = dft_length (default n: shorter signals are zero-padded, longer ones truncated),
//   m = onesided ? N / 2 + 1 : N, sign = inverse ? +1 : -1 and scale = inverse ? 1 / N : 1
//   (onnx/reference/ops/op_dft.py, onnx 1.23). inverse with onesided is the inverse real FFT
//   (numpy.fft.irfft): X holds the half spectrum (its first N / 2 + 1 rows count, default
//   N = 2 (n - 1)), Y is real (..., N, ..., 1): the full spectrum's conjugate-symmetric sum, the
//   imaginary parts of the 0 and N / 2 rows ignored. The axis is an attribute (default 1) before opset 20, an
//   optional input (default -2) from it; negative counts from the back of X, whose last dim is
//   not a signal axis, so it lies in [0, rank - 2] once normalized.
//
//   dX = DFTGrad(dY, dims(X), [dft_length], [axis]) (com.trainrt; attrs axis, inverse, onesided):
//   the transpose, dX[j] = scale * sum_{k < m} exp(-sign * 2 pi i j k / N) dY[k] for j < N (0 past
//   it), real part only for real X.
//
//   DftArgs a = dft_args(node, /*rank=*/3, axis_value);   // a.axis in [0, 1]
#pragma once

#include <cstdint>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

struct DftArgs {
  int64_t axis = 1;  // normalized into [0, rank - 2]
  bool inverse = false;
  bool onesided = false;
};

// `rank` is X's rank (>= 2); `axis_value` the node's axis input when it has one with a known
// value (DFT-20's input 2, DFTGrad's input 3), else null. Throws ShapeError naming the node for an
// axis out of range.
DftArgs dft_args(const Node& node, int64_t rank, const Tensor* axis_value);

// Where the node reads its axis (-1 when it has no such input): DFT-20 input 2, DFTGrad input 3.
int dft_axis_input(const Node& node);
// Where it reads dft_length: DFT input 1, DFTGrad input 2.
int dft_length_input(const Node& node);

// The inverse real FFT: a half spectrum in, a real signal out.
inline bool is_inverse_real(const DftArgs& a) { return a.inverse && a.onesided; }

// N when dft_length is absent, from X's `rows` along the axis.
inline int64_t dft_default_length(const DftArgs& a, int64_t rows) { return is_inverse_real(a) ? 2 * (rows - 1) : rows; }

// m: the transformed axis's length in Y for a transform of length n_fft.
inline int64_t dft_output_length(const DftArgs& a, int64_t n_fft) {
  return a.onesided && !a.inverse ? n_fft / 2 + 1 : n_fft;
}

// Y's last dim: 1 for the inverse real FFT, else 2.
inline int64_t dft_output_parts(const DftArgs& a) { return is_inverse_real(a) ? 1 : 2; }

}  // namespace trainrt
