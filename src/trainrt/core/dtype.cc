#include "trainrt/core/dtype.h"

#include "trainrt/core/error.h"

namespace trainrt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool: return 1;
    case DType::kUndefined: return 0;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kUndefined: return "undefined";
  }
  return "?";
}

bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}

bool is_integer(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kI8 || t == DType::kU8;
}

// Codes from onnx.proto TensorProto.DataType.
DType dtype_from_onnx(int code) {
  switch (code) {
    case 1: return DType::kF32;
    case 2: return DType::kU8;
    case 3: return DType::kI8;
    case 6: return DType::kI32;
    case 7: return DType::kI64;
    case 9: return DType::kBool;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 16: return DType::kBF16;
    default: break;
  }
  throw UnsupportedOp(fmt("ONNX element type ", onnx_dtype_name(code), " (", code,
                          ") is not supported; supported: FLOAT, FLOAT16, BFLOAT16, DOUBLE, INT64, "
                          "INT32, INT8, UINT8, BOOL"));
}

int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::kF32: return 1;
    case DType::kU8: return 2;
    case DType::kI8: return 3;
    case DType::kI32: return 6;
    case DType::kI64: return 7;
    case DType::kBool: return 9;
    case DType::kF16: return 10;
    case DType::kF64: return 11;
    case DType::kBF16: return 16;
    case DType::kUndefined: return 0;
  }
  return 0;
}

std::string_view onnx_dtype_name(int code) {
  static constexpr std::string_view kNames[] = {
      "UNDEFINED", "FLOAT",     "UINT8",     "INT8",           "UINT16",       "INT16",
      "INT32",     "INT64",     "STRING",    "BOOL",           "FLOAT16",      "DOUBLE",
      "UINT32",    "UINT64",    "COMPLEX64", "COMPLEX128",     "BFLOAT16",     "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",        "FLOAT4E2M1",
      "FLOAT8E8M0", "UINT2", "INT2"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

// Half conversions follow IEEE 754 binary16; f32 -> f16 rounds to nearest even.
float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (112 - exp) ... shift so that result has 10 mant bits
    uint32_t value = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  uint32_t value = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (value & 1u))) ++value;
  return static_cast<uint16_t>(sign | value);
}

}  // namespace trainrt
