// Binary and variadic elementwise kernels against double-precision references, over the
// broadcasting patterns that matter (same shape, scalar, row bias (B,T,C)+(C), per-row scale
// (B,T,C)*(B,T,1), outer products, 4-d mixes, empty) in every dtype; integer semantics (wrap,
// truncating Div, zero divisor), Pow with mixed types, NaN propagation, Where, and typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
using Dims = std::vector<int64_t>;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// (a, b) shape pairs. The last three are big enough for the multithreaded path.
const std::vector<std::pair<Dims, Dims>> kBroadcasts = {
    {{3, 4, 5}, {3, 4, 5}},      {{3, 4, 5}, {5}},          {{2, 3, 33}, {2, 3, 1}}, {{}, {7, 3}},
    {{7, 3}, {}},                {{4, 1, 6}, {1, 5, 1}},    {{1, 4, 1, 6}, {3, 1, 5, 6}},
    {{2, 1}, {1, 17}},           {{0, 3}, {3}},             {{5, 1, 3}, {5, 0, 1}},
    {{301, 333}, {333}},         {{257, 131}, {257, 1}},    {{100003}, {100003}},
};

using Fn2 = double (*)(double, double);

void check_binary(const std::string& op, DType dtype, DType out_dtype, Fn2 f, double lo, double hi, uint32_t seed) {
  for (const auto& [da, db] : kBroadcasts) {
    SCOPED_TRACE(::testing::Message() << op << " " << dtype_name(dtype) << to_string(da) << " " << to_string(db));
    Tensor a = random_of(dtype, da, seed++, lo, hi);
    Tensor b = random_of(dtype, db, seed++, lo, hi);
    Tensor want = reference(out_dtype, {&a, &b}, [&](const double* v) { return f(v[0], v[1]); });
    const double rtol = dtype == DType::kF32 ? 1e-6 : dtype_rtol(out_dtype);
    expect_close(run_node(op, {a, b})[0], want, rtol, 0);
  }
}

double trunc_div(double a, double b) { return b == 0 ? 0 : std::trunc(a / b); }

// Integer ** integer: exact; a negative exponent gives 1 / a^-b truncated (0 unless |a| = 1).
double int_pow(double a, double b) {
  if (b >= 0) return std::pow(a, b);
  if (a == 1 || a == -1) return std::pow(a, b);
  return 0;
}

TEST(BinaryKernels, ArithmeticMatchesReferenceForEveryDtypeAndBroadcast) {
  for (DType t : testing::kFloatDTypes) {
    check_binary("Add", t, t, [](double a, double b) { return a + b; }, -3, 3, 1);
    check_binary("Sub", t, t, [](double a, double b) { return a - b; }, -3, 3, 2);
    check_binary("Mul", t, t, [](double a, double b) { return a * b; }, -3, 3, 3);
    check_binary("Div", t, t, [](double a, double b) { return a / b; }, 0.5, 3, 4);
    check_binary("Pow", t, t, [](double a, double b) { return std::pow(a, b); }, 0.5, 3, 5);
  }
  for (DType t : testing::kIntDTypes) {
    const double lo = t == DType::kU8 ? 0 : -100;
    check_binary("Add", t, t, [](double a, double b) { return a + b; }, lo, 100, 6);  // i8 / u8 wrap
    check_binary("Sub", t, t, [](double a, double b) { return a - b; }, lo, 100, 7);
    check_binary("Mul", t, t, [](double a, double b) { return a * b; }, lo, 100, 8);
    check_binary("Div", t, t, trunc_div, lo, 100, 9);  // includes zero divisors
    check_binary("Pow", t, t, int_pow, t == DType::kU8 ? 0 : -3, 3, 10);
  }
}

TEST(BinaryKernels, CompareAndLogical) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32, DType::kI8, DType::kU8}) {
    // Small integer ranges so that equal values occur.
    check_binary("Equal", t, DType::kBool, [](double a, double b) { return double(a == b); }, 0, 3, 11);
    check_binary("Less", t, DType::kBool, [](double a, double b) { return double(a < b); }, 0, 3, 12);
    check_binary("LessOrEqual", t, DType::kBool, [](double a, double b) { return double(a <= b); }, 0, 3, 13);
    check_binary("Greater", t, DType::kBool, [](double a, double b) { return double(a > b); }, 0, 3, 14);
    check_binary("GreaterOrEqual", t, DType::kBool, [](double a, double b) { return double(a >= b); }, 0, 3, 15);
  }
  const DType b = DType::kBool;
  check_binary("Equal", b, b, [](double x, double y) { return double(x == y); }, 0, 1, 16);
  check_binary("And", b, b, [](double x, double y) { return double(x != 0 && y != 0); }, 0, 1, 17);
  check_binary("Or", b, b, [](double x, double y) { return double(x != 0 || y != 0); }, 0, 1, 18);
  check_binary("Xor", b, b, [](double x, double y) { return double((x != 0) != (y != 0)); }, 0, 1, 19);
}

// And, or and xor of the operands' bits, with broadcasting; negative values in two's complement.
TEST(BinaryKernels, BitwiseOpsOnEveryIntegerDtypeAndBroadcast) {
  for (DType t : testing::kIntDTypes) {
    const double lo = t == DType::kU8 ? 0 : -100;
    check_binary("BitwiseAnd", t, t, [](double a, double b) { return double(int64_t(a) & int64_t(b)); }, lo, 100, 21);
    check_binary("BitwiseOr", t, t, [](double a, double b) { return double(int64_t(a) | int64_t(b)); }, lo, 100, 22);
    check_binary("BitwiseXor", t, t, [](double a, double b) { return double(int64_t(a) ^ int64_t(b)); }, lo, 100, 23);
  }
  Tensor f = random_of(DType::kF32, {3}, 1);
  EXPECT_THROW(run_node("BitwiseOr", {f, f}), Error);
}

TEST(BinaryKernels, IntegerDivTruncatesAndNeverTraps) {
  Tensor x = from_doubles(DType::kI32, {4}, {-3, 3, -3, 3});
  Tensor y = from_doubles(DType::kI32, {4}, {2, 2, -2, -2});
  expect_close(run_node("Div", {x, y})[0], from_doubles(DType::kI32, {4}, {-1, 1, 1, -1}));  // test_div_int32_trunc
  Tensor big = from_doubles(DType::kI64, {3}, {-9223372036854775807.0 - 1, 7, -7});
  Tensor den = from_doubles(DType::kI64, {3}, {-1, 0, 0});
  Tensor q = run_node("Div", {big, den})[0];
  EXPECT_EQ(q.data<int64_t>()[0], std::numeric_limits<int64_t>::min());  // wraps like numpy
  EXPECT_EQ(q.data<int64_t>()[1], 0);
  EXPECT_EQ(q.data<int64_t>()[2], 0);
}

TEST(BinaryKernels, MinMaxPropagateNan) {
  Tensor a = from_doubles(DType::kF32, {3}, {kNan, 1, 2});
  Tensor b = from_doubles(DType::kF32, {3}, {0, kNan, 1});
  expect_close(run_node("Max", {a, b})[0], from_doubles(DType::kF32, {3}, {kNan, kNan, 2}));
  expect_close(run_node("Min", {a, b})[0], from_doubles(DType::kF32, {3}, {kNan, kNan, 1}));
}

TEST(BinaryKernels, PowMixedTypesAsOnnxTests) {
  // test_pow_types_*: the result has the base's type.
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::kF32, DType::kI64}, {DType::kI64, DType::kF32}, {DType::kF32, DType::kI32},
      {DType::kI32, DType::kF32}, {DType::kI64, DType::kI64}, {DType::kI32, DType::kI32},
      {DType::kF16, DType::kF32}, {DType::kBF16, DType::kI8}, {DType::kU8, DType::kF64}};
  for (const auto& [tx, ty] : pairs) {
    SCOPED_TRACE(::testing::Message() << dtype_name(tx) << " ** " << dtype_name(ty));
    Tensor x = from_doubles(tx, {3}, {1, 2, 3});
    Tensor y = from_doubles(ty, {3}, {4, 5, 6});
    expect_close(run_node("Pow", {x, y})[0], from_doubles(tx, {3}, {1, 32, 729}), 0, 0);
  }
  // An integer base with a fractional exponent truncates; a negative integer exponent gives 0
  // unless the base is +-1.
  expect_close(run_node("Pow", {from_doubles(DType::kI64, {2}, {10, 2}), from_doubles(DType::kF32, {2}, {0.5, -1})})[0],
               from_doubles(DType::kI64, {2}, {3, 0}));
  expect_close(run_node("Pow", {from_doubles(DType::kI32, {3}, {-1, 1, 2}), from_doubles(DType::kI32, {3}, {-3, -3, -3})})[0],
               from_doubles(DType::kI32, {3}, {-1, 1, 0}));
}

TEST(BinaryKernels, PowScalarExponentFastPaths) {
  for (double e : {2.0, 3.0, 0.5, -1.0, 1.0, 0.0, 1.7, -2.5}) {
    for (DType t : {DType::kF32, DType::kF64, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "exponent " << e << " " << dtype_name(t));
      Tensor xt = random_of(t, {40001}, 21, -4, 4);
      Tensor et = from_doubles(t, {}, {e});
      const double exponent = et.to_double(0);  // as rounded to t
      Tensor want = reference(t, {&xt}, [&](const double* v) { return std::pow(v[0], exponent); });
      expect_close(run_node("Pow", {xt, et})[0], want, t == DType::kF32 ? 1e-6 : dtype_rtol(t), 0);
    }
  }
  // IEEE pow(-inf, 0.5) = +inf (sqrt(-inf) would be NaN); pow(NaN, 0) = 1.
  Tensor special = from_doubles(DType::kF32, {2}, {-std::numeric_limits<double>::infinity(), kNan});
  Tensor r = run_node("Pow", {special, Tensor::scalar<float>(0.5f)})[0];
  EXPECT_EQ(r.data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(run_node("Pow", {special, Tensor::scalar<float>(0.f)})[0].data<float>()[1], 1.f);
}

TEST(BinaryKernels, VariadicSumMinMaxMean) {
  const std::vector<Dims> shapes = {{3}, {2, 3}, {1}, {2, 1}};
  for (DType t : {DType::kF32, DType::kF16, DType::kF64, DType::kI32}) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < shapes.size(); ++i) in.push_back(random_of(t, shapes[i], 30 + static_cast<uint32_t>(i), -5, 5));
    for (size_t n = 1; n <= in.size(); ++n) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " with " << n << " inputs");
      std::vector<Tensor> args(in.begin(), in.begin() + static_cast<int64_t>(n));
      std::vector<const Tensor*> ptrs;
      for (const Tensor& a : args) ptrs.push_back(&a);
      auto fold = [&](double (*f)(double, double)) {
        return [f, n](const double* v) {
          double acc = v[0];
          for (size_t k = 1; k < n; ++k) acc = f(acc, v[k]);
          return acc;
        };
      };
      const double rtol = dtype_rtol(t) * 2;
      expect_close(run_node("Sum", args)[0], reference(t, ptrs, fold([](double a, double b) { return a + b; })), rtol, 1e-6);
      expect_close(run_node("Max", args)[0], reference(t, ptrs, fold([](double a, double b) { return std::max(a, b); })), 0, 0);
      expect_close(run_node("Min", args)[0], reference(t, ptrs, fold([](double a, double b) { return std::min(a, b); })), 0, 0);
      if (!is_floating(t)) continue;
      auto mean = fold([](double a, double b) { return a + b; });
      expect_close(run_node("Mean", args)[0], reference(t, ptrs, [&](const double* v) { return mean(v) / double(n); }),
                   rtol, 1e-6);
    }
  }
  // Big same-shape inputs take the threaded path.
  Tensor a = random_of(DType::kF32, {70000}, 41), b = random_of(DType::kF32, {70000}, 42), c = random_of(DType::kF32, {70000}, 43);
  expect_close(run_node("Sum", {a, b, c})[0], reference(DType::kF32, {&a, &b, &c}, [](const double* v) { return v[0] + v[1] + v[2]; }),
               1e-6, 1e-6);
}

TEST(BinaryKernels, WhereBroadcastsEveryElementSize) {
  const std::vector<std::array<Dims, 3>> shapes = {
      {Dims{2, 2}, Dims{2, 2}, Dims{2, 2}}, {Dims{1, 1, 4, 4}, Dims{2, 3, 4, 4}, Dims{}},
      {Dims{4, 1}, Dims{}, Dims{1, 9}},     {Dims{33}, Dims{5, 33}, Dims{5, 1}},
      {Dims{0, 2}, Dims{2}, Dims{2}},       {Dims{128, 1, 300}, Dims{1, 3, 300}, Dims{128, 3, 1}}};
  uint32_t seed = 50;
  for (DType t : {DType::kF32, DType::kF16, DType::kF64, DType::kI64, DType::kI8, DType::kBool}) {
    for (const auto& s : shapes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << to_string(s[0]) << to_string(s[1]) << to_string(s[2]));
      Tensor c = random_of(DType::kBool, s[0], seed++);
      Tensor x = random_of(t, s[1], seed++, -50, 50);
      Tensor y = random_of(t, s[2], seed++, -50, 50);
      expect_close(run_node("Where", {c, x, y})[0],
                   reference(t, {&c, &x, &y}, [](const double* v) { return v[0] != 0 ? v[1] : v[2]; }), 0, 0);
    }
  }
  // test_where_example
  Tensor c = testing::make_tensor<bool>({2, 2}, {true, false, true, true});
  expect_close(run_node("Where", {c, from_doubles(DType::kI64, {2, 2}, {1, 2, 3, 4}), from_doubles(DType::kI64, {2, 2}, {9, 8, 7, 6})})[0],
               from_doubles(DType::kI64, {2, 2}, {1, 8, 3, 4}));
}

TEST(BinaryKernels, LegacyAxisBroadcastBeforeOpset7) {
  // Add-6 with broadcast=1, axis=1: B (3, 4) lines up with A (2, 3, 4, 5)'s dims 1 and 2.
  Tensor a = random_of(DType::kF32, {2, 3, 4, 5}, 60), b = random_of(DType::kF32, {3, 4}, 61);
  NodeSpec spec{.op = "Add", .attrs = {{"broadcast", Attribute::of_int(1)}, {"axis", Attribute::of_int(1)}}, .domain = "",
                .opset = 6};
  Tensor b1 = b.reshaped({3, 4, 1});
  expect_close(run_node(spec, {a, b}, cpu_kernel_table())[0],
               reference(DType::kF32, {&a, &b1}, [](const double* v) { return v[0] + v[1]; }), 1e-6, 0);
  // Without axis the alignment is trailing, as numpy's; an axis that does not fit is an error.
  spec.attrs = {{"broadcast", Attribute::of_int(1)}};
  Tensor c = random_of(DType::kF32, {4, 5}, 62);
  expect_close(run_node(spec, {a, c}, cpu_kernel_table())[0],
               reference(DType::kF32, {&a, &c}, [](const double* v) { return v[0] + v[1]; }), 1e-6, 0);
  spec.op = "Pow";
  spec.attrs = {{"broadcast", Attribute::of_int(1)}, {"axis", Attribute::of_int(0)}};
  Tensor d = random_of(DType::kF32, {2}, 63, 0, 2);
  Tensor d1 = d.reshaped({2, 1, 1, 1});
  Tensor pa = random_of(DType::kF32, {2, 3, 4, 5}, 64, 0.5, 2);
  expect_close(run_node(spec, {pa, d}, cpu_kernel_table())[0],
               reference(DType::kF32, {&pa, &d1}, [](const double* v) { return std::pow(v[0], v[1]); }), 1e-6, 0);
  spec.attrs = {{"broadcast", Attribute::of_int(1)}, {"axis", Attribute::of_int(3)}};
  EXPECT_THROW(run_node(spec, {pa, b}, cpu_kernel_table()), ShapeError);
}

TEST(BinaryKernels, ErrorsAreTypedAndNameShapes) {
  Tensor a = random_of(DType::kF32, {3, 4}, 1);
  try {
    run_node("Add", {a, random_of(DType::kF32, {3}, 2)});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(Add)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3)"), std::string::npos) << m;
  }
  EXPECT_THROW(run_node("Mul", {a, random_of(DType::kF64, {3, 4}, 2)}), ShapeError);    // dtype mismatch
  EXPECT_THROW(run_node("Add", {random_of(DType::kBool, {2}, 1), random_of(DType::kBool, {2}, 2)}), ShapeError);
  EXPECT_THROW(run_node("And", {a, a}), ShapeError);
  EXPECT_THROW(run_node("Where", {a, a, a}), ShapeError);                                // condition not bool
  EXPECT_THROW(run_node("Sum", {a, random_of(DType::kF32, {2, 4}, 3)}), ShapeError);
}

}  // namespace
}  // namespace trainrt
