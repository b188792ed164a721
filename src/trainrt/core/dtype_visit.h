// Implementation detail of dtype.h: the dtype visitor.
#pragma once

#include "trainrt/core/error.h"

namespace trainrt {

template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn.template operator()<float>();
    case DType::kF64: return fn.template operator()<double>();
    case DType::kF16: return fn.template operator()<Half>();
    case DType::kBF16: return fn.template operator()<BFloat16>();
    case DType::kI64: return fn.template operator()<int64_t>();
    case DType::kI32: return fn.template operator()<int32_t>();
    case DType::kI8: return fn.template operator()<int8_t>();
    case DType::kU8: return fn.template operator()<uint8_t>();
    case DType::kBool: return fn.template operator()<bool>();
    case DType::kUndefined: break;
  }
  throw UnsupportedOp(fmt("no element type for dtype ", dtype_name(t)));
}

}  // namespace trainrt
