// The elementwise kernel family (ONNX unary math and activations, binary arithmetic, compare,
// logical, variadic Sum/Min/Max/Mean, Where, Clip, Cast, Identity), split over a few files that
// share these registration helpers. register_elementwise_kernels() (cpu_kernels.h) registers it.
//
//   struct ExpOp { static constexpr DTypeSet kTypes = kFloatTypes; ... };
//   table.add("", "Exp", ExpOp::kTypes, make_unary<ExpOp>);  // kernel.h: the dtype sets
#pragma once

#include <string_view>

#include "trainrt/core/dtype.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

// Throws UnsupportedOp: "node 'n' (Exp): no CPU kernel for input <which> of dtype i64".
[[noreturn]] void throw_unsupported_dtype(const Node& node, std::string_view which, DType t);
// The dtype of input i, which must be present; throws InvalidModel naming the node otherwise.
DType input_dtype(const Node& node, int i);

void register_unary_kernels(KernelTable& table);   // unary_kernels.cc
void register_binary_kernels(KernelTable& table);  // binary_kernels.cc
void register_cast_kernels(KernelTable& table);    // cast_kernels.cc

}  // namespace trainrt
