// Element types of tensors, with their sizes, names and ONNX TensorProto codes.
//
//   DType t = dtype_from_onnx(1);          // DType::kF32
//   size_t bytes = dtype_size(t) * numel;  // 4 * numel
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace trainrt {

enum class DType : uint8_t { kUndefined, kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
bool is_floating(DType t);
bool is_integer(DType t);  // signed or unsigned integers, not bool

// ONNX TensorProto.DataType codes. dtype_from_onnx throws UnsupportedOp for types we do not run
// (string, complex, float8, int4, ...), naming the type.
DType dtype_from_onnx(int onnx_code);
int dtype_to_onnx(DType t);
std::string_view onnx_dtype_name(int onnx_code);  // "FLOAT", "STRING", ...

// IEEE half and bfloat16 conversions (round to nearest even), used by kernels and import.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Storage types for the 16-bit floats, so kernels can be templated on element type.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Compile-time DType of a C++ element type: dtype_of<float>() == DType::kF32.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<Half>() { return DType::kF16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::kBF16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }

// Calls fn.template operator()<T>() with the C++ type of `t`; throws UnsupportedOp otherwise.
// Example: visit_dtype(t, [&]<typename T>() { fill<T>(...); });
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn);

}  // namespace trainrt

#include "trainrt/core/dtype_visit.h"
