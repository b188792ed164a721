// Internal to the shape and data movement kernels: the sub-families register_tensor_kernels adds.
// The kernels that only move bytes (by dtype_size) are keyed on DType::kUndefined (any element
// type); those that compute (Dropout, Range, CumSum, ArgMax, TopK, PadGrad, ...) register under the
// dtypes they take (kernel.h).
//
//   KernelTable table;
//   register_tensor_kernels(table);  // cpu_kernels.h: adds its own kernels, then calls these
#pragma once

#include <type_traits>

#include "trainrt/core/dtype.h"

namespace trainrt {

// One element as a double, for kernels that compare values of any float or integer dtype
// (ArgMax, TopK): the 16-bit floats widened from their bits.
template <typename T>
double element_as_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) return bf16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, Half>) return f16_to_f32(v.bits);
  else return static_cast<double>(v);
}

// The inverse: a double as an element of T, the 16-bit floats rounded (to nearest even) once.
template <typename T>
T element_from_double(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{f32_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, Half>) return Half{f32_to_f16(static_cast<float>(v))};
  else return static_cast<T>(v);
}

class KernelTable;

void register_select_kernels(KernelTable& t);     // Gather, Concat, Split, Slice
void register_transpose_kernels(KernelTable& t);  // Transpose, Expand, Tile
void register_dropout_kernels(KernelTable& t);    // Dropout
void register_random_kernels(KernelTable& t);     // RandomUniform(Like), RandomNormal(Like), Bernoulli
void register_gather_elements_kernels(KernelTable& t);  // GatherElements
void register_cumsum_kernels(KernelTable& t);           // CumSum
void register_valid_rows_kernels(KernelTable& t);       // ValidRows
void register_gather_nd_kernels(KernelTable& t);        // GatherND, GatherNDGrad
void register_arg_reduce_kernels(KernelTable& t);       // ArgMax, ArgMin
void register_pad_kernels(KernelTable& t);              // Pad, PadGrad
void register_top_k_kernels(KernelTable& t);            // TopK
void register_resize_kernels(KernelTable& t);           // Resize, Upsample, ResizeGrad
void register_non_zero_kernels(KernelTable& t);         // NonZero
void register_dft_kernels(KernelTable& t);              // DFT, DFTGrad
// tensor_kernels.cc itself: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Constant,
// ConstantOfShape, Range, Trilu.

}  // namespace trainrt
