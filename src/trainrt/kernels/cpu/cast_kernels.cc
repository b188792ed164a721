// Cast and CastLike between every pair of TrainRT dtypes (f32 f16 bf16 f64 i64 i32 i8 u8 bool).
//
// Conversions follow numpy's astype, which the ONNX reference uses: float -> int truncates,
// -> bool is "!= 0", 16-bit floats round to nearest even. Float -> int out of range is
// undefined in ONNX; here it saturates to int64 and wraps into narrower types. f64 / i64 -> f16 /
// bf16 round twice (through f32). The saturate and round_mode attributes only concern float8 /
// float4 targets, which TrainRT does not have, so they are ignored.

#include <cstring>
#include <type_traits>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/elementwise.h"
#include "trainrt/kernels/cpu/elementwise_kernels.h"
#include "trainrt/ops/elementwise_args.h"

namespace trainrt {
namespace {

template <typename From, typename To>
TRAINRT_SIMD_CLONES void cast_leaf(const From* x, To* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = cast_value<To>(x[i]);
}

template <typename From, typename To>
void cast_span(const From* x, To* y, int64_t n) {
  if constexpr (std::is_same_v<From, bool> && !std::is_same_v<To, bool>) {
    // Bools are bytes holding 0 or 1; read as such, the loop vectorizes.
    cast_span(reinterpret_cast<const uint8_t*>(x), y, n);
  } else if constexpr (std::is_same_v<From, To>) {
    if (x != y) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(To));
  } else if constexpr (kIsHalfLike<From> && std::is_same_v<To, float>) {
    convert_to_f32(x, y, n);
  } else if constexpr (std::is_same_v<From, float> && kIsHalfLike<To>) {
    convert_from_f32(x, y, n);
  } else if constexpr (kIsHalfLike<From> || kIsHalfLike<To>) {
    float buf[kConvertBlock];  // through f32, a block at a time
    for (int64_t i = 0; i < n; i += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, n - i);
      if constexpr (kIsHalfLike<From>) convert_to_f32(x + i, buf, m);
      else cast_leaf(x + i, buf, m);
      if constexpr (kIsHalfLike<To>) convert_from_f32(buf, y + i, m);
      else cast_leaf(static_cast<const float*>(buf), y + i, m);
    }
  } else {
    cast_leaf(x, y, n);
  }
}

KernelFn cast_kernel(const Node& node, DType to) {
  const DType from = input_dtype(node, 0);
  return visit_dtype(from, [&]<typename From>() -> KernelFn {
    return visit_dtype(to, [&]<typename To>() -> KernelFn {
      return [](KernelContext& ctx) {
        const From* x = ctx.in(0).data<From>();
        To* y = ctx.out(0).data<To>();
        parallel_elements(ctx.threads(), ctx.out(0).numel(),
                          [&](int64_t begin, int64_t end) { cast_span(x + begin, y + begin, end - begin); });
      };
    });
  });
}

KernelFn make_cast(const Node& node) { return cast_kernel(node, cast_target_dtype(node)); }

KernelFn make_cast_like(const Node& node) { return cast_kernel(node, input_dtype(node, 1)); }

}  // namespace

void register_cast_kernels(KernelTable& t) {
  t.add("", "Cast", kAllTypes, make_cast);
  t.add("", "CastLike", kAllTypes, make_cast_like);
}

}  // namespace trainrt
