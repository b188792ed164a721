// Unary elementwise kernels against double-precision references: every float dtype, sizes that
// exercise the vector tails, empty and 0-d tensors and the multithreaded path; integer variants,
// IEEE special values, Clip in both opset forms, attribute defaults and typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::dtype_rtol;
using testing::expect_close;
using testing::from_doubles;
using testing::random_of;
using testing::reference;
using Attrs = std::map<std::string, Attribute>;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Sizes: 0-d, empty, one element, vector tails, a 3-d shape, and big enough for two threads.
const std::vector<std::vector<int64_t>> kShapes = {{}, {0}, {1}, {17}, {3, 5, 7}, {100003}};

struct UnaryCase {
  std::string op;
  Attrs attrs;
  double lo, hi;  // input range
  double (*ref)(double);
};

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));  // 0.5 x (1 + tanh(u)) without cancellation
}
double selu_ref(double x, double alpha, double gamma) { return gamma * (x > 0 ? x : alpha * std::expm1(x)); }

std::vector<UnaryCase> float_cases() {
  return {
      {"Neg", {}, -5, 5, [](double x) { return -x; }},
      {"Abs", {}, -5, 5, [](double x) { return std::fabs(x); }},
      {"Sign", {}, -2, 2, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }},
      {"Relu", {}, -5, 5, [](double x) { return std::max(x, 0.0); }},
      {"LeakyRelu", {}, -5, 5, [](double x) { return x < 0 ? double(0.01f) * x : x; }},
      {"LeakyRelu", {{"alpha", Attribute::of_float(0.1f)}}, -5, 5,
       [](double x) { return x < 0 ? double(0.1f) * x : x; }},
      {"Exp", {}, -87, 88, [](double x) { return std::exp(x); }},
      {"Log", {}, 1e-3, 1e4, [](double x) { return std::log(x); }},
      {"Sqrt", {}, 0, 100, [](double x) { return std::sqrt(x); }},
      {"Reciprocal", {}, 0.01, 100, [](double x) { return 1.0 / x; }},
      {"Floor", {}, -100, 100, [](double x) { return std::floor(x); }},
      {"Ceil", {}, -100, 100, [](double x) { return std::ceil(x); }},
      {"Sigmoid", {}, -30, 30, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"Tanh", {}, -10, 10, [](double x) { return std::tanh(x); }},
      {"Erf", {}, -5, 5, [](double x) { return std::erf(x); }},
      {"Sin", {}, -4000, 4000, [](double x) { return std::sin(x); }},
      {"Cos", {}, -4000, 4000, [](double x) { return std::cos(x); }},
      {"Gelu", {}, -8, 8, gelu_ref},
      {"Gelu", {{"approximate", Attribute::of_string("tanh")}}, -8, 8, gelu_tanh_ref},
      {"Softplus", {}, -30, 30, [](double x) { return std::log1p(std::exp(x)); }},
      {"HardSigmoid", {}, -5, 5, [](double x) { return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0); }},
      {"HardSwish", {}, -5, 5, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }},
      {"HardSigmoid", {{"alpha", Attribute::of_float(0.5f)}, {"beta", Attribute::of_float(0.6f)}}, -5, 5,
       [](double x) { return std::clamp(0.5 * x + double(0.6f), 0.0, 1.0); }},
      {"Elu", {}, -5, 5, [](double x) { return x < 0 ? std::expm1(x) : x; }},
      {"Elu", {{"alpha", Attribute::of_float(2.f)}}, -5, 5, [](double x) { return x < 0 ? 2 * std::expm1(x) : x; }},
      {"Selu", {}, -5, 5,
       [](double x) { return selu_ref(x, 1.67326319217681884765625, 1.05070102214813232421875); }},
      {"Selu", {{"alpha", Attribute::of_float(2.f)}, {"gamma", Attribute::of_float(3.f)}}, -5, 5,
       [](double x) { return selu_ref(x, 2, 3); }},
  };
}

// Float attributes are f32, so the references use the f32-rounded constants (0.01f, ...).
TEST(UnaryKernels, FloatOpsMatchDoubleReferenceForEveryFloatDtypeAndSize) {
  uint32_t seed = 1;
  for (const UnaryCase& c : float_cases()) {
    for (DType dtype : testing::kFloatDTypes) {
      for (const auto& dims : kShapes) {
        SCOPED_TRACE(::testing::Message() << c.op << " " << dtype_name(dtype) << to_string(dims));
        Tensor x = random_of(dtype, dims, seed++, c.lo, c.hi);
        Tensor want = reference(dtype, {&x}, [&](const double* v) { return c.ref(v[0]); });
        const double rtol = dtype == DType::kF64 ? 1e-12 : std::max(dtype_rtol(dtype), 1e-6);
        expect_close(run_node(c.op, {x}, c.attrs)[0], want, rtol, dtype == DType::kF64 ? 1e-14 : 1e-7);
      }
    }
  }
}

// Halves go to the even neighbour (torch.round, numpy.round, ONNX Round); every float dtype.
TEST(UnaryKernels, RoundTakesHalvesToEven) {
  const std::vector<double> x = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 3.7, -3.2, 1e20, kInf, -kInf};
  const std::vector<double> want = {-2, -2, -0.0, 0, 2, 2, 0, -1, 4, -3, 1e20, kInf, -kInf};
  for (DType dtype : testing::kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t n = static_cast<int64_t>(x.size());
    expect_close(run_node("Round", {from_doubles(dtype, {n}, x)})[0], from_doubles(dtype, {n}, want), 0, 0);
  }
  EXPECT_TRUE(std::isnan(run_node("Round", {from_doubles(DType::kF32, {1}, {kNan})})[0].data<float>()[0]));
}

TEST(UnaryKernels, SpecialValuesFollowIeee) {
  const std::vector<double> x = {kNan, kInf, -kInf, 0.0, -0.0, 1e-40, -1e-40, 200, -200};
  const Tensor in = from_doubles(DType::kF32, {9}, x);
  const std::vector<std::pair<std::string, double (*)(double)>> ops = {
      {"Exp", [](double v) { return std::exp(v); }},
      {"Log", [](double v) { return std::log(v); }},
      {"Sqrt", [](double v) { return std::sqrt(v); }},
      {"Tanh", [](double v) { return std::tanh(v); }},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"Erf", [](double v) { return std::erf(v); }},
      {"Sin", [](double v) { return std::sin(v); }},
      {"Cos", [](double v) { return std::cos(v); }},
      {"Relu", [](double v) { return v < 0 ? 0.0 : v; }},
      {"Abs", [](double v) { return std::fabs(v); }},
      {"Floor", [](double v) { return std::floor(v); }},
      {"Ceil", [](double v) { return std::ceil(v); }},
      {"Softplus", [](double v) { return v > 30 ? v : std::log1p(std::exp(v)); }},
      {"Reciprocal", [](double v) { return 1 / v; }},
  };
  for (const auto& [op, f] : ops) {
    SCOPED_TRACE(op);
    Tensor got = run_node(op, {in})[0];
    for (int64_t i = 0; i < in.numel(); ++i) {
      const double want = static_cast<float>(f(in.to_double(i))), have = got.to_double(i);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(have)) << "x = " << in.to_double(i);
      else if (std::isinf(want)) EXPECT_EQ(have, want) << "x = " << in.to_double(i);
      else EXPECT_NEAR(have, want, 1e-6 * std::fabs(want) + 3e-45) << "x = " << in.to_double(i);
    }
  }
  // Signs of zero: floor(-0) = -0, ceil(-0.5) = -0.
  Tensor z = run_node("Ceil", {from_doubles(DType::kF32, {2}, {-0.5, -0.0})})[0];
  EXPECT_TRUE(std::signbit(z.data<float>()[0]) && std::signbit(z.data<float>()[1]));
}

TEST(UnaryKernels, IsNaNAndIsInfClassifyEveryFloatDtype) {
  const std::vector<double> x = {kNan, kInf, -kInf, 0.0, -1.5, 3e38};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor in = from_doubles(dtype, {6}, x);
    const auto bools = [](const Tensor& t) {
      std::vector<int> v;
      for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(t.to_double(i)));
      return v;
    };
    EXPECT_EQ(run_node("IsNaN", {in})[0].dtype(), DType::kBool);
    EXPECT_EQ(bools(run_node("IsNaN", {in})[0]), (std::vector<int>{1, 0, 0, 0, 0, 0}));
    // 3e38 rounds to inf in f16 only.
    const int big = dtype == DType::kF16;
    EXPECT_EQ(bools(run_node("IsInf", {in})[0]), (std::vector<int>{0, 1, 1, 0, 0, big}));
    EXPECT_EQ(bools(run_node("IsInf", {in}, {{"detect_negative", Attribute::of_int(0)}})[0]),
              (std::vector<int>{0, 1, 0, 0, 0, big}));
    EXPECT_EQ(bools(run_node("IsInf", {in}, {{"detect_positive", Attribute::of_int(0)}})[0]),
              (std::vector<int>{0, 0, 1, 0, 0, 0}));
  }
}

TEST(UnaryKernels, IntegerVariants) {
  for (DType dtype : testing::kIntDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool is_signed = dtype != DType::kU8;
    Tensor x = random_of(dtype, {5, 13}, 3, is_signed ? -100 : 0, 100);
    expect_close(run_node("Abs", {x})[0], reference(dtype, {&x}, [](const double* v) { return std::fabs(v[0]); }));
    expect_close(run_node("Sign", {x})[0],
                 reference(dtype, {&x}, [](const double* v) { return double((v[0] > 0) - (v[0] < 0)); }));
    if (!is_signed) continue;
    expect_close(run_node("Neg", {x})[0], reference(dtype, {&x}, [](const double* v) { return -v[0]; }));
    expect_close(run_node("Relu", {x})[0], reference(dtype, {&x}, [](const double* v) { return std::max(v[0], 0.0); }));
  }
  // Negating the most negative value wraps, as in numpy.
  Tensor min8 = from_doubles(DType::kI8, {1}, {-128});
  EXPECT_EQ(run_node("Neg", {min8})[0].data<int8_t>()[0], -128);
  EXPECT_EQ(run_node("Abs", {min8})[0].data<int8_t>()[0], -128);
}

// ~x on the two's-complement bits: -x - 1 for signed types, 255 - x for u8.
TEST(UnaryKernels, BitwiseNotFlipsEveryBitOfEveryIntegerDtype) {
  for (DType dtype : testing::kIntDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool is_signed = dtype != DType::kU8;
    Tensor x = random_of(dtype, {5, 13}, 11, is_signed ? -100 : 0, 100);
    expect_close(run_node("BitwiseNot", {x})[0],
                 reference(dtype, {&x}, [&](const double* v) { return is_signed ? -v[0] - 1 : 255 - v[0]; }), 0, 0);
  }
  EXPECT_THROW(run_node("BitwiseNot", {random_of(DType::kF32, {3}, 1)}), Error);
}

TEST(UnaryKernels, NotAndIdentity) {
  Tensor b = random_of(DType::kBool, {4, 33}, 5);
  expect_close(run_node("Not", {b})[0], reference(DType::kBool, {&b}, [](const double* v) { return v[0] == 0 ? 1.0 : 0.0; }));
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32, DType::kI8,
                      DType::kU8, DType::kBool}) {
    for (const auto& dims : kShapes) {
      Tensor x = random_of(dtype, dims, 7);
      expect_close(run_node("Identity", {x})[0], x, 0, 0);
    }
  }
}

Tensor scalar_f32(float v) { return Tensor::scalar<float>(v); }

TEST(UnaryKernels, ClipWithOptionalInputs) {
  Tensor x = from_doubles(DType::kF32, {6}, {-2, 0, 2, kInf, -kInf, kNan});
  auto clip = [](double v, double lo, double hi) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); };
  expect_close(run_node("Clip", {x, scalar_f32(-1), scalar_f32(1)})[0],
               reference(DType::kF32, {&x}, [&](const double* v) { return clip(v[0], -1, 1); }));
  // Only min; only max (min omitted); neither: the other bound is infinite.
  expect_close(run_node("Clip", {x, scalar_f32(0)})[0],
               reference(DType::kF32, {&x}, [&](const double* v) { return clip(v[0], 0, kInf); }));
  expect_close(run_node("Clip", {x, Tensor(), scalar_f32(0)})[0],
               reference(DType::kF32, {&x}, [&](const double* v) { return clip(v[0], -kInf, 0); }));
  expect_close(run_node("Clip", {x})[0], x);
  // min > max gives max everywhere (numpy.clip, test_clip_min_greater_than_max).
  Tensor y = from_doubles(DType::kF32, {3}, {-2, 0, 6});
  expect_close(run_node("Clip", {y, scalar_f32(2), scalar_f32(1)})[0], from_doubles(DType::kF32, {3}, {1, 1, 1}));
  // Integer and 16-bit types, a 1-element (not 0-d) bound, and the threaded size.
  Tensor xi = random_of(DType::kI8, {100}, 9, -100, 100);
  expect_close(run_node("Clip", {xi, from_doubles(DType::kI8, {1}, {-5})})[0],
               reference(DType::kI8, {&xi}, [](const double* v) { return std::max(v[0], -5.0); }));
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF64}) {
    Tensor xh = random_of(dtype, {70001}, 11);
    expect_close(run_node("Clip", {xh, from_doubles(dtype, {}, {-0.5}), from_doubles(dtype, {}, {0.75})})[0],
                 reference(dtype, {&xh}, [](const double* v) { return std::clamp(v[0], -0.5, 0.75); }), 0, 0);
  }
}

TEST(UnaryKernels, ClipOpset6TakesAttributes) {
  Tensor x = random_of(DType::kF32, {40}, 13);
  NodeSpec spec{.op = "Clip", .attrs = {{"min", Attribute::of_float(-0.5f)}, {"max", Attribute::of_float(0.5f)}},
                .domain = "", .opset = 6};
  expect_close(run_node(spec, {x}, cpu_kernel_table())[0],
               reference(DType::kF32, {&x}, [](const double* v) { return std::clamp(v[0], -0.5, 0.5); }));
  spec.attrs = {{"max", Attribute::of_float(0.f)}};
  expect_close(run_node(spec, {x}, cpu_kernel_table())[0],
               reference(DType::kF32, {&x}, [](const double* v) { return std::min(v[0], 0.0); }));
}

TEST(UnaryKernels, OnnxExamples) {
  Tensor x = from_doubles(DType::kF32, {3}, {-1, 0, 1});
  expect_close(run_node("Gelu", {x}, {{"approximate", Attribute::of_string("tanh")}})[0],
               from_doubles(DType::kF32, {3}, {-0.158808, 0., 0.841192}), 1e-5, 1e-6);
  expect_close(run_node("Gelu", {x})[0], from_doubles(DType::kF32, {3}, {-0.15865526, 0., 0.84134474}), 1e-6, 1e-7);
  expect_close(run_node("Elu", {x}, {{"alpha", Attribute::of_float(2.f)}})[0],
               from_doubles(DType::kF32, {3}, {-1.2642411, 0., 1.}), 1e-6, 1e-7);
  expect_close(run_node("Softplus", {x})[0], from_doubles(DType::kF32, {3}, {0.31326166, 0.69314718, 1.31326163}),
               1e-6, 1e-7);
}

TEST(UnaryKernels, ErrorsAreTypedAndNameTheNode) {
  Tensor i = from_doubles(DType::kI32, {2}, {1, 2});
  EXPECT_THROW(run_node("Exp", {i}), ShapeError);  // rejected by the schema
  EXPECT_THROW(run_node("Gelu", {random_of(DType::kF32, {2}, 1)}, {{"approximate", Attribute::of_string("erf")}}),
               ShapeError);
  EXPECT_THROW(run_node("Clip", {random_of(DType::kF32, {2}, 1), random_of(DType::kF32, {2}, 2)}), ShapeError);
  try {
    run_node("Not", {random_of(DType::kF32, {2}, 1)});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(Not)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
