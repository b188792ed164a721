// The elementwise kernel family (ONNX unary math and activations, binary arithmetic, compare,
// logical, variadic Sum/Min/Max/Mean, Where, Clip, Cast, Identity), split over a few files that
// share these registration helpers. register_elementwise_kernels() (cpu_kernels.h) registers it.
//
//   struct ExpOp { static constexpr DTypeSet kTypes = kFloatTypes; ... };
//   add_kernels(table, "Exp", ExpOp::kTypes, make_unary<ExpOp>);
#pragma once

#include <cstdint>
#include <string_view>

#include "trainrt/core/dtype.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

// A set of DTypes as a bit mask, for the dtypes an op's kernel supports.
using DTypeSet = uint32_t;
constexpr DTypeSet dtype_bit(DType t) { return DTypeSet{1} << static_cast<unsigned>(t); }
inline constexpr DTypeSet kFloatTypes =
    dtype_bit(DType::kF32) | dtype_bit(DType::kF16) | dtype_bit(DType::kBF16) | dtype_bit(DType::kF64);
inline constexpr DTypeSet kSignedIntTypes =
    dtype_bit(DType::kI64) | dtype_bit(DType::kI32) | dtype_bit(DType::kI8);
inline constexpr DTypeSet kSignedTypes = kFloatTypes | kSignedIntTypes;
inline constexpr DTypeSet kNumericTypes = kSignedTypes | dtype_bit(DType::kU8);
inline constexpr DTypeSet kIntegerTypes = kSignedIntTypes | dtype_bit(DType::kU8);
inline constexpr DTypeSet kBoolTypes = dtype_bit(DType::kBool);
inline constexpr DTypeSet kAllTypes = kNumericTypes | kBoolTypes;

template <typename T>
constexpr bool dtype_in(DTypeSet set) {
  return (set & dtype_bit(dtype_of<T>())) != 0;
}

// Registers `factory` for op (ONNX domain) under every dtype in `types`.
void add_kernels(KernelTable& table, std::string_view op, DTypeSet types, KernelFactory factory);

// Throws UnsupportedOp: "node 'n' (Exp): no CPU kernel for input <which> of dtype i64".
[[noreturn]] void throw_unsupported_dtype(const Node& node, std::string_view which, DType t);
// The dtype of input i, which must be present; throws InvalidModel naming the node otherwise.
DType input_dtype(const Node& node, int i);

void register_unary_kernels(KernelTable& table);   // unary_kernels.cc
void register_binary_kernels(KernelTable& table);  // binary_kernels.cc
void register_cast_kernels(KernelTable& table);    // cast_kernels.cc

}  // namespace trainrt
