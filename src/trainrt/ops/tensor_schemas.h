// Internal to the shape and data movement op family (register_tensor_schemas): the sub-families it
// registers and the argument readers their inference functions share.
//
// Many of these ops take an int list that older opsets gave as an attribute and newer ones as an
// input (Squeeze axes, Split split, Reshape shape, Slice starts). read_ints_arg reads whichever
// form the node uses:
//
//   std::vector<int64_t> axes;
//   switch (read_ints_arg(ctx, /*input=*/1, "axes", axes)) {
//     case ArgState::kAbsent: ...   // neither input nor attribute: the op's default
//     case ArgState::kUnknown: ...  // an input whose value is not known yet (plan time)
//     case ArgState::kKnown: ...    // `axes` holds the values
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/ops/op_schema.h"

namespace trainrt {

// Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile.
void register_reshape_schemas(OpRegistry& r);
// Gather, Concat, Split, Slice.
void register_select_schemas(OpRegistry& r);
// Shape, Size, Constant, ConstantOfShape, Range, Trilu, Dropout.
void register_source_schemas(OpRegistry& r);
void register_gather_elements_schema(OpRegistry& r);  // GatherElements
void register_cumsum_schema(OpRegistry& r);           // CumSum
void register_valid_rows_schema(OpRegistry& r);       // ValidRows (valid_rows.h)
void register_gather_nd_schemas(OpRegistry& r);       // GatherND, GatherNDGrad
void register_arg_reduce_schemas(OpRegistry& r);      // ArgMax, ArgMin
void register_pad_schemas(OpRegistry& r);             // Pad, PadGrad
void register_top_k_schema(OpRegistry& r);            // TopK
void register_resize_schemas(OpRegistry& r);          // Resize, Upsample, ResizeGrad
void register_non_zero_schema(OpRegistry& r);         // NonZero
void register_dft_schemas(OpRegistry& r);             // DFT, DFTGrad

enum class ArgState { kAbsent, kUnknown, kKnown };

// Reads input `input` when the node has it (it must be i64 or i32), else attribute `attr`.
ArgState read_ints_arg(const InferenceContext& ctx, int input, const std::string& attr,
                       std::vector<int64_t>& out);

// normalize_axis with the error naming the node through ctx.fail.
int64_t checked_axis(const InferenceContext& ctx, int64_t axis, int64_t rank, const char* what);

// The length of 1-D input `input` when its shape says it (a shape-like input whose values are not
// known may still fix the output rank), else nullopt.
std::optional<int64_t> static_length(const InferenceContext& ctx, int input);
// (?, ?, ...) of the given rank, or unknown rank when the rank is not known either.
Shape dynamic_shape(std::optional<int64_t> rank);
// The shape a 1-D i64 dims input gives (a gradient op's dims(X)): static when its value is known,
// else dynamic dims of its length.
Shape shape_of_dims_input(const InferenceContext& ctx, int input);

// Product of dims[begin, end): static when all are, the one dynamic dim itself when the others
// multiply to 1, 0 when a static dim is 0, else an unnamed dynamic dim.
Dim dim_product(const std::vector<Dim>& dims, size_t begin, size_t end);

}  // namespace trainrt
