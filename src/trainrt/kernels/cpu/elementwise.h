// Loop drivers for elementwise CPU kernels: unary maps and broadcasting binary maps over any
// element type, vectorized leaf loops, f16/bf16 computed in f32, big tensors split over threads.
//
// An op is a small functor called on arithmetic-type values (arith_t: float for Half and
// BFloat16, the element type itself otherwise); the drivers handle storage types, broadcasting,
// blocking and threads. Leaf loops are compiled for AVX-512, AVX2 and baseline x86-64 (TRAINRT_SIMD_CLONES),
// so an op written as plain branch-free C++ (see vector_math.h) is vectorized.
//
//   struct Square { float operator()(float x) const { return x * x; } };
//   map_unary<float, float>(Square{}, x, y, ctx.threads());            // y = x * x
//   struct Add { float operator()(float a, float b) const { return a + b; } };
//   map_binary<float, float, float>(Add{}, a, b, y, ctx.threads());    // y = a + b, broadcast
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "trainrt/core/dtype.h"
#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/simd.h"
#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/kernels/cpu/broadcast.h"

namespace trainrt {

// Elements per parallel task; loops shorter than two tasks run on the calling thread.
inline constexpr int64_t kElementwiseGrain = 16384;
// Elements converted at a time when computing f16/bf16 in f32 (stack buffers).
inline constexpr int64_t kConvertBlock = 512;

// Runs fn(begin, end) over [0, n), split over the pool's threads when n is large enough to pay.
template <typename F>
void parallel_elements(ThreadPool& pool, int64_t n, F&& fn) {
  if (n <= 0) return;
  if (n < 2 * kElementwiseGrain) {
    fn(int64_t{0}, n);
    return;
  }
  pool.parallel_for(n, kElementwiseGrain, fn);
}

// The arithmetic type of an element type: float for the 16-bit floats, the type itself otherwise.
// (Unlike the reductions' accumulator type, integers stay integers.)
template <typename T>
struct ArithTypeOf {
  using type = T;
};
template <>
struct ArithTypeOf<Half> {
  using type = float;
};
template <>
struct ArithTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using arith_t = typename ArithTypeOf<T>::type;
template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// One stored value as its arithmetic type, and back.
template <typename T>
arith_t<T> to_arith(T v) {
  if constexpr (std::is_same_v<T, Half>) return f16_to_f32(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>) return bf16_to_f32(v.bits);
  else return v;
}
template <typename T>
T from_arith(arith_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) return Half{f32_to_f16(v)};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{f32_to_bf16(v)};
  else return v;
}

// A floating value converted to integer type To: truncated toward zero; NaN gives 0, values
// beyond int64 saturate, and the int64 wraps into narrower types (numpy's result for -1.0 -> u8).
template <typename To, typename From>
To float_to_int(From v) {
  if (!(v == v)) return To{0};
  if (v <= From(-9223372036854775808.0)) return static_cast<To>(INT64_MIN);
  if (v >= From(9223372036854775808.0)) return static_cast<To>(INT64_MAX);
  return static_cast<To>(static_cast<int64_t>(v));
}

// One value converted between element types as ONNX Cast does. 16-bit floats go through float;
// to bool is "!= 0" (NaN is true).
template <typename To, typename From>
To cast_value(From v) {
  if constexpr (kIsHalfLike<From>) return cast_value<To>(to_arith(v));
  else if constexpr (kIsHalfLike<To>) return from_arith<To>(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) return float_to_int<To>(v);
  else return static_cast<To>(v);
}

// Copies nbytes (in parallel when large); a no-op when dst == src (an in-place copy).
void copy_bytes(void* dst, const void* src, size_t nbytes, ThreadPool& pool);

// Arithmetic-type view of n stored elements: the elements themselves, or converted into buf.
template <typename T>
const arith_t<T>* load_arith(const T* x, int64_t n, arith_t<T>* buf) {
  if constexpr (kIsHalfLike<T>) {
    convert_to_f32(x, buf, n);
    return buf;
  } else {
    return x;
  }
}

// Leaf loops. `#pragma GCC ivdep`: element i is read before it is written, so an output that
// aliases an input (in-place kernels) carries no dependence between iterations.
template <typename Op, typename T, typename R>
TRAINRT_SIMD_CLONES void unary_leaf(Op op, const T* x, R* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
}
template <typename Op, typename A, typename B, typename R>
TRAINRT_SIMD_CLONES void binary_leaf_vv(Op op, const A* a, const B* b, R* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], b[i]);
}
template <typename Op, typename A, typename B, typename R>
TRAINRT_SIMD_CLONES void binary_leaf_vs(Op op, const A* a, B b, R* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], b);
}
template <typename Op, typename A, typename B, typename R>
TRAINRT_SIMD_CLONES void binary_leaf_sv(Op op, A a, const B* b, R* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = op(a, b[i]);
}

// y[i] = op(x[i]) over n elements of storage types T -> R (converting 16-bit floats in blocks).
template <typename T, typename R, typename Op>
void unary_span(const Op& op, const T* x, R* y, int64_t n) {
  if constexpr (!kIsHalfLike<T> && !kIsHalfLike<R>) {
    unary_leaf(op, x, y, n);
  } else {
    arith_t<T> in_buf[kConvertBlock];
    arith_t<R> out_buf[kConvertBlock];
    for (int64_t i = 0; i < n; i += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, n - i);
      const arith_t<T>* in = load_arith(x + i, m, in_buf);
      if constexpr (kIsHalfLike<R>) {
        unary_leaf(op, in, out_buf, m);
        convert_from_f32(out_buf, y + i, m);
      } else {
        unary_leaf(op, in, y + i, m);
      }
    }
  }
}

// One run of a binary op: a and b advance per element when va / vb, else repeat a[0] / b[0].
template <typename A, typename B, typename R, typename Op>
void binary_span(const Op& op, const A* a, bool va, const B* b, bool vb, R* y, int64_t n) {
  if constexpr (!kIsHalfLike<A> && !kIsHalfLike<B> && !kIsHalfLike<R>) {
    if (va && vb) binary_leaf_vv(op, a, b, y, n);
    else if (va) binary_leaf_vs(op, a, *b, y, n);
    else binary_leaf_sv(op, *a, b, y, n);
  } else {
    arith_t<A> a_buf[kConvertBlock];
    arith_t<B> b_buf[kConvertBlock];
    arith_t<R> y_buf[kConvertBlock];
    for (int64_t i = 0; i < n; i += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, n - i);
      const arith_t<A>* ca = load_arith(va ? a + i : a, va ? m : 1, a_buf);
      const arith_t<B>* cb = load_arith(vb ? b + i : b, vb ? m : 1, b_buf);
      arith_t<R>* cy;
      if constexpr (kIsHalfLike<R>) cy = y_buf;
      else cy = y + i;
      if (va && vb) binary_leaf_vv(op, ca, cb, cy, m);
      else if (va) binary_leaf_vs(op, ca, *cb, cy, m);
      else binary_leaf_sv(op, *ca, cb, cy, m);
      if constexpr (kIsHalfLike<R>) convert_from_f32(y_buf, y + i, m);
    }
  }
}

// y = op(x) elementwise; x and y have the same number of elements (y may alias x).
template <typename T, typename R, typename Op>
void map_unary(const Op& op, const Tensor& x, Tensor& y, ThreadPool& pool) {
  const T* xs = x.data<T>();
  R* ys = y.data<R>();
  parallel_elements(pool, y.numel(), [&](int64_t begin, int64_t end) {
    unary_span(op, xs + begin, ys + begin, end - begin);
  });
}

// How input `x` lines up with output dims `y` in the broadcasts training graphs use most; these
// run without building a BroadcastPlan (no allocation per call).
enum class BroadcastForm { kSame, kScalar, kRow, kColumn, kGeneral };
inline BroadcastForm broadcast_form(const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  if (x == y) return BroadcastForm::kSame;
  int64_t xn = 1;
  for (int64_t d : x) xn *= d;
  if (xn == 1) return BroadcastForm::kScalar;
  // kRow: x is y's trailing dims (after leading 1s), e.g. (B, T, C) + (C).
  size_t lead = 0;
  while (lead < x.size() && x[lead] == 1) ++lead;
  size_t tail = x.size() - lead;
  if (tail <= y.size() && std::equal(x.begin() + static_cast<std::ptrdiff_t>(lead), x.end(), y.end() - static_cast<std::ptrdiff_t>(tail)))
    return BroadcastForm::kRow;
  // kColumn: x is y with the last dim 1, e.g. (B, T, C) * (B, T, 1).
  if (x.size() == y.size() && !y.empty() && x.back() == 1 &&
      std::equal(x.begin(), x.end() - 1, y.begin()))
    return BroadcastForm::kColumn;
  return BroadcastForm::kGeneral;
}

// Runs binary_span over [begin, end) of y when `b` has form `form` (a is y-shaped).
template <typename A, typename B, typename R, typename Op>
void binary_runs(const Op& op, const A* as, const B* bs, R* ys, BroadcastForm form, int64_t row,
                 int64_t begin, int64_t end, bool b_first) {
  auto span = [&](const A* a, const B* b, bool vb, R* y, int64_t len) {
    if (b_first) binary_span(op, b, vb, a, true, y, len);
    else binary_span(op, a, true, b, vb, y, len);
  };
  switch (form) {
    case BroadcastForm::kSame: return span(as + begin, bs + begin, true, ys + begin, end - begin);
    case BroadcastForm::kScalar: return span(as + begin, bs, false, ys + begin, end - begin);
    case BroadcastForm::kRow:
      for (int64_t i = begin; i < end;) {
        int64_t col = i % row, len = std::min(row - col, end - i);
        span(as + i, bs + col, true, ys + i, len);
        i += len;
      }
      return;
    case BroadcastForm::kColumn:
      for (int64_t i = begin; i < end;) {
        int64_t r = i / row, len = std::min((r + 1) * row, end) - i;
        span(as + i, bs + r, false, ys + i, len);
        i += len;
      }
      return;
    case BroadcastForm::kGeneral: return;
  }
}

// y = op(a, b) with a and b broadcast to y's dims (y may alias an input of y's size).
template <typename A, typename B, typename R, typename Op>
void map_binary(const Op& op, const Tensor& a, const Tensor& b, Tensor& y, ThreadPool& pool) {
  const A* as = a.data<A>();
  const B* bs = b.data<B>();
  R* ys = y.data<R>();
  const int64_t row = y.rank() ? y.dims().back() : 1;
  // Common training shapes first: one operand has y's dims, the other a simple broadcast of it.
  if (a.dims() == y.dims()) {
    BroadcastForm form = broadcast_form(b.dims(), y.dims());
    int64_t b_row = form == BroadcastForm::kRow ? std::max<int64_t>(b.numel(), 1) : row;
    if (form != BroadcastForm::kGeneral) {
      parallel_elements(pool, y.numel(), [&](int64_t begin, int64_t end) {
        binary_runs(op, as, bs, ys, form, b_row, begin, end, false);
      });
      return;
    }
  } else if (b.dims() == y.dims()) {
    BroadcastForm form = broadcast_form(a.dims(), y.dims());
    int64_t a_row = form == BroadcastForm::kRow ? std::max<int64_t>(a.numel(), 1) : row;
    if (form != BroadcastForm::kGeneral && form != BroadcastForm::kSame) {
      parallel_elements(pool, y.numel(), [&](int64_t begin, int64_t end) {
        binary_runs(op, bs, as, ys, form, a_row, begin, end, true);
      });
      return;
    }
  }
  const BroadcastPlan plan({&a.dims(), &b.dims()}, y.dims());
  const bool va = plan.inner_stride(0) != 0;
  const bool vb = plan.inner_stride(1) != 0;
  parallel_elements(pool, plan.numel(), [&](int64_t begin, int64_t end) {
    plan.for_each_run(begin, end, [&](const int64_t* off, int64_t out, int64_t len) {
      binary_span(op, as + off[0], va, bs + off[1], vb, ys + out, len);
    });
  });
}

}  // namespace trainrt
