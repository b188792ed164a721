// Unary elementwise kernels: math, activations, Clip, Not, Identity (ONNX semantics).
//
// Each op is a functor over arithmetic types (arith_t): float (also for f16 / bf16, converted in
// blocks) with the vectorizable math of vector_math.h, double with std:: math, and integer types
// where ONNX defines the op for them. Attributes are read once when the kernel is made.

#include <cmath>
#include <limits>
#include <type_traits>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/elementwise.h"
#include "trainrt/kernels/cpu/elementwise_kernels.h"
#include "trainrt/kernels/cpu/vector_math.h"

namespace trainrt {
namespace {

// -x with two's-complement wrap for integers (-INT_MIN == INT_MIN, as in numpy).
template <typename T>
T negate(T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U{0} - static_cast<U>(x)));
  } else {
    return -x;
  }
}

struct NegOp {
  static constexpr DTypeSet kTypes = kSignedTypes;
  template <typename T>
  T operator()(T x) const { return negate(x); }
};

struct AbsOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  float operator()(float x) const { return abs_f32(x); }
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
    else if constexpr (std::is_signed_v<T>) return x < 0 ? negate(x) : x;
    else return x;
  }
};

struct SignOp {
  static constexpr DTypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // NaN, +-0 stay
    else return static_cast<T>((x > T(0)) - (x < T(0)));
  }
};

struct ReluOp {
  static constexpr DTypeSet kTypes = kSignedTypes;
  template <typename T>
  T operator()(T x) const { return x < T(0) ? T(0) : x; }  // NaN stays NaN
};

struct LeakyReluOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  explicit LeakyReluOp(const Node& node) : alpha(node.attr_float("alpha", 0.01f)) {}
  float operator()(float x) const { return select_f32(x < 0.f, alpha * x, x); }
  double operator()(double x) const { return x < 0 ? alpha * x : x; }
  float alpha;
};

struct ExpOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return exp_f32(x); }
  double operator()(double x) const { return std::exp(x); }
};

struct LogOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return log_f32(x); }
  double operator()(double x) const { return std::log(x); }
};

struct SqrtOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const { return std::sqrt(x); }
};

struct ReciprocalOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const { return T(1) / x; }
};

struct FloorOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return floor_f32(x); }
  double operator()(double x) const { return std::floor(x); }
};

// ONNX Round: to the nearest integer, halves to even (std::nearbyint in the default rounding mode),
// as torch.round.
struct RoundOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const { return std::nearbyint(x); }
};

struct CeilOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return ceil_f32(x); }
  double operator()(double x) const { return std::ceil(x); }
};

struct SigmoidOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return sigmoid_f32(x); }
  double operator()(double x) const { return 1.0 / (1.0 + std::exp(-x)); }
};

struct TanhOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return tanh_f32(x); }
  double operator()(double x) const { return std::tanh(x); }
};

struct ErfOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return erf_f32(x); }
  double operator()(double x) const { return std::erf(x); }
};

// glibc's sinf / cosf (under 1 ulp, with full argument reduction: rotary embeddings take angles
// up to the context length in radians).
struct SinOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const { return std::sin(x); }
};

struct CosOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const { return std::cos(x); }
};

// The rest of the trigonometric and hyperbolic family (ONNX Tan, Asin, ... Atanh), std's functions.
#define TRAINRT_STD_UNARY(Name, fn)                       \
  struct Name {                                           \
    static constexpr DTypeSet kTypes = kFloatTypes;       \
    template <typename T>                                 \
    T operator()(T x) const { return std::fn(x); }        \
  };
TRAINRT_STD_UNARY(TanOp, tan)
TRAINRT_STD_UNARY(AsinOp, asin)
TRAINRT_STD_UNARY(AcosOp, acos)
TRAINRT_STD_UNARY(AtanOp, atan)
TRAINRT_STD_UNARY(SinhOp, sinh)
TRAINRT_STD_UNARY(CoshOp, cosh)
TRAINRT_STD_UNARY(AsinhOp, asinh)
TRAINRT_STD_UNARY(AcoshOp, acosh)
TRAINRT_STD_UNARY(AtanhOp, atanh)
#undef TRAINRT_STD_UNARY

// Gelu-20, approximate="none": x Phi(x).
struct GeluOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return gelu_f32(x); }
  double operator()(double x) const { return 0.5 * x * std::erfc(-x * M_SQRT1_2); }
};

// Gelu-20, approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluTanhOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return gelu_tanh_f32(x); }
  double operator()(double x) const {
    const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + std::exp(-2.0 * u));  // = 0.5 x (1 + tanh(u)), without cancellation
  }
};

// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which neither overflows nor cancels.
struct SoftplusOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  float operator()(float x) const { return (x < 0.f ? 0.f : x) + log1p_f32(exp_f32(-abs_f32(x))); }
  double operator()(double x) const { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
};

// max(0, min(1, alpha x + beta)).
struct HardSigmoidOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  explicit HardSigmoidOp(const Node& node)
      : alpha(node.attr_float("alpha", 0.2f)), beta(node.attr_float("beta", 0.5f)) {}
  template <typename T>
  T operator()(T x) const {
    T v = T(alpha) * x + T(beta);
    v = v < T(0) ? T(0) : v;
    return v > T(1) ? T(1) : v;
  }
  float alpha, beta;
};

// x * HardSigmoid(x) with alpha 1/6, beta 1/2 (ONNX HardSwish; torch's hardswish).
struct HardSwishOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  template <typename T>
  T operator()(T x) const {
    T v = x * T(1.0 / 6.0) + T(0.5);
    v = v < T(0) ? T(0) : v;
    return x * (v > T(1) ? T(1) : v);
  }
};

// x for x > 0, alpha (exp(x) - 1) otherwise.
struct EluOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  explicit EluOp(const Node& node) : alpha(node.attr_float("alpha", 1.f)) {}
  float operator()(float x) const { return select_f32(x < 0.f, alpha * expm1_f32(x), x); }
  double operator()(double x) const { return x < 0 ? alpha * std::expm1(x) : x; }
  float alpha;
};

// gamma x for x > 0, gamma alpha (exp(x) - 1) otherwise; defaults from the SELU paper.
struct SeluOp {
  static constexpr DTypeSet kTypes = kFloatTypes;
  explicit SeluOp(const Node& node)
      : alpha(node.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(node.attr_float("gamma", 1.05070102214813232421875f)) {}
  float operator()(float x) const { return gamma * select_f32(x > 0.f, x, alpha * expm1_f32(x)); }
  double operator()(double x) const { return gamma * (x > 0 ? x : alpha * std::expm1(x)); }
  float alpha, gamma;
};

// On bools read as the bytes 0 / 1: GCC does not vectorize loops over bool loads.
struct NotOp {
  uint8_t operator()(uint8_t x) const { return x ^ 1u; }
};

// ONNX BitwiseNot (opset 18): every bit of an integer flipped.
struct BitwiseNotOp {
  static constexpr DTypeSet kTypes = kIntegerTypes;
  template <typename T>
  T operator()(T x) const { return static_cast<T>(~x); }
};

// The kernel for `op` on the node's input dtype: y = op(x), same dtype.
template <typename Op>
KernelFn unary_kernel(const Node& node, const Op& op) {
  const DType t = input_dtype(node, 0);
  return visit_dtype(t, [&]<typename T>() -> KernelFn {
    if constexpr (dtype_in<T>(Op::kTypes)) {
      return [op](KernelContext& ctx) { map_unary<T, T>(op, ctx.in(0), ctx.out(0), ctx.threads()); };
    } else {
      throw_unsupported_dtype(node, "input 0", t);
    }
  });
}

template <typename Op>
KernelFn make_unary(const Node& node) {
  if constexpr (std::is_constructible_v<Op, const Node&>) return unary_kernel(node, Op(node));
  else return unary_kernel(node, Op{});
}

KernelFn make_not(const Node&) {
  return [](KernelContext& ctx) { map_unary<uint8_t, uint8_t>(NotOp{}, ctx.in(0), ctx.out(0), ctx.threads()); };
}

KernelFn make_gelu(const Node& node) {
  const std::string approximate = node.attr_string("approximate", "none");
  if (approximate == "none") return unary_kernel(node, GeluOp{});
  if (approximate == "tanh") return unary_kernel(node, GeluTanhOp{});
  throw InvalidModel(fmt(node.describe(), ": attribute approximate is '", approximate,
                         "', expected 'none' or 'tanh'"));
}

template <typename C>
struct ClipOp {
  C lo, hi;
  C operator()(C x) const {
    const C v = x < lo ? lo : x;  // NaN stays NaN; min > max gives max, as numpy.clip
    return v > hi ? hi : v;
  }
};

// Clip-11+: optional scalar inputs min and max. Clip-6: float attributes min and max.
KernelFn make_clip(const Node& node) {
  const DType t = input_dtype(node, 0);
  const bool bounds_are_attrs = node.opset() < 11;
  for (int i = 1; i <= 2 && !bounds_are_attrs; ++i)
    if (node.input(i) && node.input(i)->dtype != t)
      throw InvalidModel(fmt(node.describe(), ": input ", i, " has dtype ", dtype_name(node.input(i)->dtype),
                             ", expected ", dtype_name(t), " like input 0"));
  const bool has_min_attr = node.has_attr("min"), has_max_attr = node.has_attr("max");
  const float min_attr = node.attr_float("min", 0.f), max_attr = node.attr_float("max", 0.f);
  const std::string where = node.describe();
  return visit_dtype(t, [&]<typename T>() -> KernelFn {
    if constexpr (dtype_in<T>(kNumericTypes)) {
      using C = arith_t<T>;
      constexpr bool kFloat = std::is_floating_point_v<C>;
      constexpr C kLowest = kFloat ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
      constexpr C kHighest = kFloat ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
      return [=](KernelContext& ctx) {
        ClipOp<C> op{kLowest, kHighest};
        if (bounds_are_attrs) {
          if (has_min_attr) op.lo = static_cast<C>(min_attr);
          if (has_max_attr) op.hi = static_cast<C>(max_attr);
        } else {
          for (int i = 1; i <= 2; ++i) {
            if (!ctx.has_in(i)) continue;
            if (ctx.in(i).numel() != 1)
              throw ShapeError(fmt(where, ": input ", i, " has shape ", to_string(ctx.in(i).dims()),
                                   ", expected a scalar"));
            (i == 1 ? op.lo : op.hi) = to_arith(*ctx.in(i).data<T>());
          }
        }
        map_unary<T, T>(op, ctx.in(0), ctx.out(0), ctx.threads());
      };
    } else {
      throw_unsupported_dtype(node, "input 0", t);
    }
  });
}

// IsNaN; IsInf with detect_negative / detect_positive (ONNX, both 1 by default). The exporters
// emit them as guards (a softmax of a fully masked row), so one plain pass is enough.
KernelFn make_float_class(const Node& node) {
  const bool nan = node.op_type() == "IsNaN";
  const bool negative = node.attr_int("detect_negative", 1) != 0, positive = node.attr_int("detect_positive", 1) != 0;
  return [nan, negative, positive](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    auto* out = static_cast<uint8_t*>(ctx.out(0).raw());
    const auto classify = [&](float v) -> uint8_t {
      if (nan) return std::isnan(v);
      return std::isinf(v) && ((v > 0 && positive) || (v < 0 && negative));
    };
    const int64_t n = x.numel();
    switch (x.dtype()) {
      case DType::kF32: for (int64_t i = 0; i < n; ++i) out[i] = classify(x.data<float>()[i]); break;
      case DType::kF64:
        for (int64_t i = 0; i < n; ++i) {
          const double v = x.data<double>()[i];  // kept double: a finite double may overflow a float
          out[i] = nan ? std::isnan(v) : std::isinf(v) && ((v > 0 && positive) || (v < 0 && negative));
        }
        break;
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) out[i] = classify(bf16_to_f32(x.data<BFloat16>()[i].bits));
        break;
      default:
        for (int64_t i = 0; i < n; ++i) out[i] = classify(f16_to_f32(x.data<Half>()[i].bits));
    }
  };
}

KernelFn make_identity(const Node&) {
  return [](KernelContext& ctx) {
    copy_bytes(ctx.out(0).raw(), ctx.in(0).raw(), ctx.in(0).nbytes(), ctx.threads());
  };
}

}  // namespace

void register_unary_kernels(KernelTable& t) {
  t.add("", "Neg", NegOp::kTypes, make_unary<NegOp>);
  t.add("", "Abs", AbsOp::kTypes, make_unary<AbsOp>);
  t.add("", "Sign", SignOp::kTypes, make_unary<SignOp>);
  t.add("", "Relu", ReluOp::kTypes, make_unary<ReluOp>);
  t.add("", "LeakyRelu", LeakyReluOp::kTypes, make_unary<LeakyReluOp>);
  t.add("", "Exp", ExpOp::kTypes, make_unary<ExpOp>);
  t.add("", "Log", LogOp::kTypes, make_unary<LogOp>);
  t.add("", "Sqrt", SqrtOp::kTypes, make_unary<SqrtOp>);
  t.add("", "Reciprocal", ReciprocalOp::kTypes, make_unary<ReciprocalOp>);
  t.add("", "Floor", FloorOp::kTypes, make_unary<FloorOp>);
  t.add("", "Round", RoundOp::kTypes, make_unary<RoundOp>);
  t.add("", "Ceil", CeilOp::kTypes, make_unary<CeilOp>);
  t.add("", "Sigmoid", SigmoidOp::kTypes, make_unary<SigmoidOp>);
  t.add("", "Tanh", TanhOp::kTypes, make_unary<TanhOp>);
  t.add("", "Erf", ErfOp::kTypes, make_unary<ErfOp>);
  t.add("", "Sin", SinOp::kTypes, make_unary<SinOp>);
  t.add("", "Cos", CosOp::kTypes, make_unary<CosOp>);
  t.add("", "Tan", TanOp::kTypes, make_unary<TanOp>);
  t.add("", "Asin", AsinOp::kTypes, make_unary<AsinOp>);
  t.add("", "Acos", AcosOp::kTypes, make_unary<AcosOp>);
  t.add("", "Atan", AtanOp::kTypes, make_unary<AtanOp>);
  t.add("", "Sinh", SinhOp::kTypes, make_unary<SinhOp>);
  t.add("", "Cosh", CoshOp::kTypes, make_unary<CoshOp>);
  t.add("", "Asinh", AsinhOp::kTypes, make_unary<AsinhOp>);
  t.add("", "Acosh", AcoshOp::kTypes, make_unary<AcoshOp>);
  t.add("", "Atanh", AtanhOp::kTypes, make_unary<AtanhOp>);
  t.add("", "Gelu", kFloatTypes, make_gelu);
  t.add("", "Softplus", SoftplusOp::kTypes, make_unary<SoftplusOp>);
  t.add("", "HardSigmoid", HardSigmoidOp::kTypes, make_unary<HardSigmoidOp>);
  t.add("", "HardSwish", HardSwishOp::kTypes, make_unary<HardSwishOp>);
  t.add("", "Elu", EluOp::kTypes, make_unary<EluOp>);
  t.add("", "Selu", SeluOp::kTypes, make_unary<SeluOp>);
  t.add("", "Not", kBoolTypes, make_not);
  t.add("", "BitwiseNot", BitwiseNotOp::kTypes, make_unary<BitwiseNotOp>);
  t.add("", "IsNaN", kFloatTypes, make_float_class);
  t.add("", "IsInf", kFloatTypes, make_float_class);
  t.add("", "Clip", kNumericTypes, make_clip);
  t.add("", "Identity", kAllTypes, make_identity);
}

}  // namespace trainrt
