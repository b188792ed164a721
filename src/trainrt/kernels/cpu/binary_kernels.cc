// Binary and variadic elementwise kernels with ONNX multidirectional broadcasting: arithmetic,
// Pow, compare, logical, Sum / Min / Max / Mean, and Where.
//
// Integer arithmetic wraps (two's complement, as numpy); integer Div truncates toward zero and
// gives 0 for a zero divisor (the ONNX reference's result) instead of trapping.

#include <cmath>
#include <concepts>
#include <limits>
#include <type_traits>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/elementwise.h"
#include "trainrt/kernels/cpu/elementwise_kernels.h"
#include "trainrt/ops/elementwise_args.h"

namespace trainrt {
namespace {

// The type integer arithmetic is done in so that overflow wraps: unsigned for integers.
template <typename T>
struct WrapTypeOf {
  using type = T;
};
template <std::integral T>
struct WrapTypeOf<T> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using WrapType = typename WrapTypeOf<T>::type;

struct AddOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b)); }
};

struct SubOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b)); }
};

struct MulOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b)); }
};

// Mod with fmod = 1: C's fmod, the sign of the dividend (floats must use it, ONNX).
struct FmodOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
    else return b == 0 ? T(0) : static_cast<T>(a % b);
  }
};

// Mod with fmod = 0 (integers): the sign of the divisor, as Python's % and torch.remainder.
struct ModOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    } else {
      if (b == 0) return T(0);
      T r = static_cast<T>(a % b);
      if constexpr (std::is_signed_v<T>)
        if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    }
  }
};

struct DivOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0) return 0;  // x86 would trap; the ONNX reference gives 0
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return static_cast<T>(WrapType<T>{0} - static_cast<WrapType<T>>(a));  // MIN / -1 wraps
      return static_cast<T>(a / b);
    }
  }
};

// Max / Min propagate NaN (numpy.maximum, torch.maximum).
struct MaxOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const { return ((a > b) | (a != a)) ? a : b; }
};

struct MinOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const { return ((a < b) | (a != a)) ? a : b; }
};

struct EqualOp {
  static constexpr DTypeSet kTypes = kAllTypes;
  static constexpr bool kCompare = true;
  template <typename T>
  bool operator()(T a, T b) const { return a == b; }
};

struct LessOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  static constexpr bool kCompare = true;
  template <typename T>
  bool operator()(T a, T b) const { return a < b; }
};

struct LessOrEqualOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  static constexpr bool kCompare = true;
  template <typename T>
  bool operator()(T a, T b) const { return a <= b; }
};

struct GreaterOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  static constexpr bool kCompare = true;
  template <typename T>
  bool operator()(T a, T b) const { return a > b; }
};

struct GreaterOrEqualOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  static constexpr bool kCompare = true;
  template <typename T>
  bool operator()(T a, T b) const { return a >= b; }
};

struct AndOp {
  static constexpr DTypeSet kTypes = kBoolTypes;
  bool operator()(bool a, bool b) const { return a & b; }
};

struct OrOp {
  static constexpr DTypeSet kTypes = kBoolTypes;
  bool operator()(bool a, bool b) const { return a | b; }
};

struct XorOp {
  static constexpr DTypeSet kTypes = kBoolTypes;
  bool operator()(bool a, bool b) const { return a != b; }
};

// ONNX BitwiseAnd / BitwiseOr / BitwiseXor (opset 18): on the two's-complement bits of integers.
struct BitwiseAndOp {
  static constexpr DTypeSet kTypes = kIntegerTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(a & b); }
};

struct BitwiseOrOp {
  static constexpr DTypeSet kTypes = kIntegerTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(a | b); }
};

struct BitwiseXorOp {
  static constexpr DTypeSet kTypes = kIntegerTypes;
  template <typename T>
  T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

template <typename Op>
constexpr bool is_compare() {
  if constexpr (requires { Op::kCompare; }) return Op::kCompare;
  else return false;
}

// Both inputs must have input 0's dtype (schemas check this; the kernel relies on it).
DType same_input_dtypes(const Node& node) {
  const DType t = input_dtype(node, 0);
  for (int i = 1; i < node.num_inputs(); ++i)
    if (input_dtype(node, i) != t)
      throw InvalidModel(fmt(node.describe(), ": input ", i, " has dtype ", dtype_name(input_dtype(node, i)),
                             ", expected ", dtype_name(t), " like input 0"));
  return t;
}

// Before opset 7 a binary op may align input 1 with input 0 at attribute `axis`; this many 1-dims
// appended to input 1 turn that into numpy broadcasting (0 for every later opset).
int64_t legacy_trailing_ones(const Node& node) {
  if (node.opset() >= 7) return 0;
  const Shape& a = node.input(0)->shape;
  const Shape& b = node.input(1)->shape;
  if (a.rank_known && b.rank_known) return legacy_broadcast_trailing_ones(node, a.rank(), b.rank());
  if (node.has_attr("axis"))
    throw UnsupportedOp(fmt(node.describe(), ": broadcast with axis needs the input ranks at plan time"));
  return 0;
}

// Input 1 as broadcasting reads it: itself, or a view with `ones` trailing 1-dims.
Tensor aligned_input1(const Tensor& b, int64_t ones) {
  std::vector<int64_t> dims = b.dims();
  dims.insert(dims.end(), static_cast<size_t>(ones), 1);
  return b.reshaped(std::move(dims));
}

template <typename Op>
KernelFn make_binary(const Node& node) {
  const DType t = same_input_dtypes(node);
  const int64_t ones = legacy_trailing_ones(node);
  return visit_dtype(t, [&]<typename T>() -> KernelFn {
    if constexpr (dtype_in<T>(Op::kTypes)) {
      using R = std::conditional_t<is_compare<Op>(), bool, T>;
      if (ones > 0) {
        return [ones](KernelContext& ctx) {
          map_binary<T, T, R>(Op{}, ctx.in(0), aligned_input1(ctx.in(1), ones), ctx.out(0), ctx.threads());
        };
      }
      return [](KernelContext& ctx) {
        map_binary<T, T, R>(Op{}, ctx.in(0), ctx.in(1), ctx.out(0), ctx.threads());
      };
    } else {
      throw_unsupported_dtype(node, "input 0", t);
    }
  });
}

template <typename C>
struct ScaleOp {
  C s;
  C operator()(C x) const { return x * s; }
};

// Sum / Min / Max / Mean of one or more inputs broadcast together: y = op(x0, x1), then
// y = op(y, xk) for the rest (y may alias x0 or x1, never a later input).
template <typename Op, bool kMean>
KernelFn make_variadic(const Node& node) {
  const DType t = same_input_dtypes(node);
  return visit_dtype(t, [&]<typename T>() -> KernelFn {
    if constexpr (dtype_in<T>(Op::kTypes) && (!kMean || dtype_in<T>(kFloatTypes))) {
      return [](KernelContext& ctx) {
        const int n = static_cast<int>(ctx.inputs.size());
        Tensor& y = ctx.out(0);
        if (n == 1) {
          copy_bytes(y.raw(), ctx.in(0).raw(), y.nbytes(), ctx.threads());
        } else {
          map_binary<T, T, T>(Op{}, ctx.in(0), ctx.in(1), y, ctx.threads());
          for (int k = 2; k < n; ++k) map_binary<T, T, T>(Op{}, y, ctx.in(k), y, ctx.threads());
        }
        if constexpr (kMean) {
          using C = arith_t<T>;
          map_unary<T, T>(ScaleOp<C>{C(1) / C(n)}, y, y, ctx.threads());
        }
      };
    } else {
      throw_unsupported_dtype(node, "input 0", t);
    }
  });
}

// Integer power by squaring, wrapping on overflow; negative exponents give 1 / a^-b truncated.
template <typename T>
T int_pow(T base, int64_t exp) {
  using U = WrapType<T>;
  if (exp < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
    return 0;
  }
  U result = 1, b = static_cast<U>(base);
  for (; exp > 0; exp >>= 1, b = static_cast<U>(b * b))
    if (exp & 1) result = static_cast<U>(result * b);
  return static_cast<T>(result);
}

// Pow-12+: base and exponent may have different numeric types; the result has the base's type.
// Like numpy, integer ** integer stays exact; anything else is computed in double.
template <typename A, typename B>
void pow_span(const A* a, bool va, const B* b, bool vb, A* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const auto x = to_arith(a[va ? i : 0]);
    const auto e = to_arith(b[vb ? i : 0]);
    if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
      y[i] = int_pow<A>(x, static_cast<int64_t>(e));
    } else {
      y[i] = cast_value<A>(std::pow(static_cast<double>(x), static_cast<double>(e)));
    }
  }
}

// Fast paths for a floating base and one exponent value, the common case in real models
// (x^2 in norms and losses, x^3 in tanh-GELU, x^0.5).
template <typename C>
struct PowScalarOp {
  C e;
  C operator()(C x) const { return std::pow(x, e); }
};
template <typename C>
struct SquareOp {
  C operator()(C x) const { return x * x; }
};
template <typename C>
struct CubeOp {
  C operator()(C x) const { return x * x * x; }
};
template <typename C>
struct SqrtOfOp {  // pow(x, 0.5): as sqrt, except pow(-inf, 0.5) = +inf
  C operator()(C x) const {
    const C r = std::sqrt(x);
    return x == -std::numeric_limits<C>::infinity() ? std::numeric_limits<C>::infinity() : r;
  }
};
template <typename C>
struct InverseOp {
  C operator()(C x) const { return C(1) / x; }
};

template <typename T>
void pow_scalar_exponent(double e, const Tensor& x, Tensor& y, ThreadPool& pool) {
  using C = arith_t<T>;
  if (e == 2) map_unary<T, T>(SquareOp<C>{}, x, y, pool);
  else if (e == 3) map_unary<T, T>(CubeOp<C>{}, x, y, pool);
  else if (e == 0.5) map_unary<T, T>(SqrtOfOp<C>{}, x, y, pool);
  else if (e == -1) map_unary<T, T>(InverseOp<C>{}, x, y, pool);
  else if (e == 1) copy_bytes(y.raw(), x.raw(), x.nbytes(), pool);
  else map_unary<T, T>(PowScalarOp<C>{static_cast<C>(e)}, x, y, pool);
}

template <typename A, typename B>
void run_pow(const Tensor& a, const Tensor& b, Tensor& y, ThreadPool& pool) {
  if constexpr (std::is_floating_point_v<arith_t<A>>) {
    if (b.numel() == 1 && a.numel() == y.numel()) return pow_scalar_exponent<A>(b.to_double(0), a, y, pool);
  }
  const BroadcastPlan plan({&a.dims(), &b.dims()}, y.dims());
  const bool va = plan.inner_stride(0) != 0, vb = plan.inner_stride(1) != 0;
  parallel_elements(pool, plan.numel(), [&](int64_t begin, int64_t end) {
    plan.for_each_run(begin, end, [&](const int64_t* off, int64_t out, int64_t len) {
      pow_span(a.data<A>() + off[0], va, b.data<B>() + off[1], vb, y.data<A>() + out, len);
    });
  });
}

KernelFn make_pow(const Node& node) {
  const DType ta = input_dtype(node, 0), tb = input_dtype(node, 1);
  const int64_t ones = legacy_trailing_ones(node);
  return visit_dtype(ta, [&]<typename A>() -> KernelFn {
    return visit_dtype(tb, [&]<typename B>() -> KernelFn {
      if constexpr (dtype_in<A>(kNumericTypes) && dtype_in<B>(kNumericTypes)) {
        return [ones](KernelContext& ctx) {
          if (ones > 0) run_pow<A, B>(ctx.in(0), aligned_input1(ctx.in(1), ones), ctx.out(0), ctx.threads());
          else run_pow<A, B>(ctx.in(0), ctx.in(1), ctx.out(0), ctx.threads());
        };
      } else {
        throw_unsupported_dtype(node, dtype_in<A>(kNumericTypes) ? "input 1" : "input 0",
                                dtype_in<A>(kNumericTypes) ? tb : ta);
      }
    });
  });
}

// Where on raw element bits (U has the element's size): out = c ? x : y, each operand advancing
// per element when its flag is set. A mask blend, so both operands are read, and the condition
// read as bytes (0 or 1; GCC does not vectorize widening bool loads): the loop vectorizes.
template <typename U, bool kVc, bool kVx, bool kVy>
TRAINRT_SIMD_CLONES void where_leaf(const uint8_t* c, const U* x, const U* y, U* out, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const U mask = static_cast<U>(U{0} - static_cast<U>(c[kVc ? i : 0]));
    out[i] = static_cast<U>((x[kVx ? i : 0] & mask) | (y[kVy ? i : 0] & static_cast<U>(~mask)));
  }
}

template <typename U>
void where_span(const uint8_t* c, bool vc, const U* x, bool vx, const U* y, bool vy, U* out, int64_t n) {
  if (vc) {
    if (vx) vy ? where_leaf<U, true, true, true>(c, x, y, out, n) : where_leaf<U, true, true, false>(c, x, y, out, n);
    else vy ? where_leaf<U, true, false, true>(c, x, y, out, n) : where_leaf<U, true, false, false>(c, x, y, out, n);
  } else {
    if (vx) vy ? where_leaf<U, false, true, true>(c, x, y, out, n) : where_leaf<U, false, true, false>(c, x, y, out, n);
    else vy ? where_leaf<U, false, false, true>(c, x, y, out, n) : where_leaf<U, false, false, false>(c, x, y, out, n);
  }
}

template <typename U>
void run_where(const Tensor& c, const Tensor& x, const Tensor& y, Tensor& out, ThreadPool& pool) {
  const BroadcastPlan plan({&c.dims(), &x.dims(), &y.dims()}, out.dims());
  const bool vc = plan.inner_stride(0) != 0, vx = plan.inner_stride(1) != 0, vy = plan.inner_stride(2) != 0;
  const uint8_t* cs = static_cast<const uint8_t*>(c.raw());
  const U* xs = static_cast<const U*>(x.raw());
  const U* ys = static_cast<const U*>(y.raw());
  U* os = static_cast<U*>(out.raw());
  parallel_elements(pool, plan.numel(), [&](int64_t begin, int64_t end) {
    plan.for_each_run(begin, end, [&](const int64_t* off, int64_t o, int64_t len) {
      where_span(cs + off[0], vc, xs + off[1], vx, ys + off[2], vy, os + o, len);
    });
  });
}

template <typename U>
KernelFn where_kernel() {
  return [](KernelContext& ctx) { run_where<U>(ctx.in(0), ctx.in(1), ctx.in(2), ctx.out(0), ctx.threads()); };
}

KernelFn make_where(const Node& node) {
  if (input_dtype(node, 0) != DType::kBool)
    throw_unsupported_dtype(node, "input 0 (condition)", input_dtype(node, 0));
  const DType t = input_dtype(node, 1);
  if (input_dtype(node, 2) != t)
    throw InvalidModel(fmt(node.describe(), ": input 2 has dtype ", dtype_name(input_dtype(node, 2)),
                           ", expected ", dtype_name(t), " like input 1"));
  switch (dtype_size(t)) {
    case 1: return where_kernel<uint8_t>();
    case 2: return where_kernel<uint16_t>();
    case 4: return where_kernel<uint32_t>();
    case 8: return where_kernel<uint64_t>();
  }
  throw_unsupported_dtype(node, "input 1", t);
}

KernelFn make_mod(const Node& node) {
  return node.attr_int("fmod", 0) != 0 ? make_binary<FmodOp>(node) : make_binary<ModOp>(node);
}

}  // namespace

void register_binary_kernels(KernelTable& t) {
  t.add("", "Add", AddOp::kTypes, make_binary<AddOp>);
  t.add("", "Sub", SubOp::kTypes, make_binary<SubOp>);
  t.add("", "Mul", MulOp::kTypes, make_binary<MulOp>);
  t.add("", "Div", DivOp::kTypes, make_binary<DivOp>);
  t.add("", "Mod", ModOp::kTypes, make_mod);
  t.add("", "Pow", kNumericTypes, make_pow);
  t.add("", "Equal", EqualOp::kTypes, make_binary<EqualOp>);
  t.add("", "Less", LessOp::kTypes, make_binary<LessOp>);
  t.add("", "LessOrEqual", LessOrEqualOp::kTypes, make_binary<LessOrEqualOp>);
  t.add("", "Greater", GreaterOp::kTypes, make_binary<GreaterOp>);
  t.add("", "GreaterOrEqual", GreaterOrEqualOp::kTypes, make_binary<GreaterOrEqualOp>);
  t.add("", "And", AndOp::kTypes, make_binary<AndOp>);
  t.add("", "Or", OrOp::kTypes, make_binary<OrOp>);
  t.add("", "Xor", XorOp::kTypes, make_binary<XorOp>);
  t.add("", "BitwiseAnd", BitwiseAndOp::kTypes, make_binary<BitwiseAndOp>);
  t.add("", "BitwiseOr", BitwiseOrOp::kTypes, make_binary<BitwiseOrOp>);
  t.add("", "BitwiseXor", BitwiseXorOp::kTypes, make_binary<BitwiseXorOp>);
  t.add("", "Sum", kNumericTypes, make_variadic<AddOp, false>);
  t.add("", "Mean", kFloatTypes, make_variadic<AddOp, true>);
  t.add("", "Max", kNumericTypes, make_variadic<MaxOp, false>);
  t.add("", "Min", kNumericTypes, make_variadic<MinOp, false>);
  t.add("", "Where", kBoolTypes, make_where);
}

}  // namespace trainrt
