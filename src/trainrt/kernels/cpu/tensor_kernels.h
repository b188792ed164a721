// Internal to the shape and data movement kernels: the sub-families register_tensor_kernels adds.
// The kernels are keyed on DType::kUndefined (any element type) and move bytes by dtype_size,
// except Dropout (float types), Range and CumSum, which compute.
//
//   KernelTable table;
//   register_tensor_kernels(table);  // cpu_kernels.h: adds its own kernels, then calls these
#pragma once

namespace trainrt {

class KernelTable;

void register_select_kernels(KernelTable& t);     // Gather, Concat, Split, Slice
void register_transpose_kernels(KernelTable& t);  // Transpose, Expand, Tile
void register_dropout_kernels(KernelTable& t);    // Dropout
void register_gather_elements_kernels(KernelTable& t);  // GatherElements
void register_cumsum_kernels(KernelTable& t);           // CumSum
void register_valid_rows_kernels(KernelTable& t);       // ValidRows
void register_gather_nd_kernels(KernelTable& t);        // GatherND, GatherNDGrad
void register_arg_reduce_kernels(KernelTable& t);       // ArgMax, ArgMin
void register_pad_kernels(KernelTable& t);              // Pad, PadGrad
void register_top_k_kernels(KernelTable& t);            // TopK
// tensor_kernels.cc itself: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Constant,
// ConstantOfShape, Range, Trilu.

}  // namespace trainrt
