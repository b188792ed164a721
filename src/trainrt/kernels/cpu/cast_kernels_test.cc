// Cast and CastLike between every pair of dtypes against numpy's astype semantics, the IEEE
// special values of the ONNX Cast tests, the threaded path, and typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::from_doubles;
using testing::random_of;
using testing::reference;

constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64,
                          DType::kI32, DType::kI8,  DType::kU8,   DType::kBool};

Attribute to(DType t) { return Attribute::of_int(dtype_to_onnx(t)); }

// Values each source dtype can hold exactly, with fractions and negatives where it has them.
Tensor source_values(DType t, std::vector<int64_t> dims) {
  if (t == DType::kBool) return random_of(t, std::move(dims), 1);
  if (t == DType::kU8) return random_of(t, std::move(dims), 2, 0, 255);
  if (is_integer(t)) return random_of(t, std::move(dims), 3, -120, 120);
  std::vector<double> v = {0.47892547, -0.48033667, 1.5, -2.5, 100.25, -100.75, 0, 1, -1, 7.75, 127, -128};
  v.resize(static_cast<size_t>(numel_of(dims)), 3.25);
  return from_doubles(t, std::move(dims), v);
}

TEST(CastKernels, EveryPairMatchesAstype) {
  for (DType from : kAll) {
    for (DType target : kAll) {
      for (const std::vector<int64_t>& dims : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{}, std::vector<int64_t>{0}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(target) << to_string(dims));
        Tensor x = source_values(from, dims);
        // Truncation toward zero for float -> integer; from_doubles then wraps into the type.
        Tensor want = reference(target, {&x}, [&](const double* v) {
          return is_integer(target) && is_floating(from) ? std::trunc(v[0]) : v[0];
        });
        expect_close(run_node("Cast", {x}, {{"to", to(target)}})[0], want, 0, 0);
        expect_close(run_node("CastLike", {x, Tensor::empty(target, {0})})[0], want, 0, 0);
      }
    }
  }
}

TEST(CastKernels, SpecialValuesBetweenFloatTypes) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {0.47892547, 0.48033667, 0.49968487, 0.81910545, 0.47031248, 0.816468,
                                 0.21087195, 0.7229038,  std::nan(""), inf,       inf,        -inf};
  for (DType from : testing::kFloatDTypes) {
    Tensor x = from_doubles(from, {3, 4}, v);
    for (DType target : testing::kFloatDTypes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(target));
      expect_close(run_node("Cast", {x}, {{"to", to(target)}})[0],
                   reference(target, {&x}, [](const double* e) { return e[0]; }), 0, 0);
    }
    // NaN is true, as numpy's astype(bool).
    Tensor b = run_node("Cast", {x}, {{"to", to(DType::kBool)}})[0];
    EXPECT_TRUE(b.data<bool>()[8]);
  }
  // Round to nearest even into bf16 (test_cast_FLOAT_to_BFLOAT16).
  Tensor f = from_doubles(DType::kF32, {2}, {1.00390625, 1.01171875});  // halfway: 1 + 2^-8, 1 + 3 * 2^-8
  Tensor b = run_node("Cast", {f}, {{"to", to(DType::kBF16)}})[0];
  EXPECT_EQ(b.to_double(0), 1.0);
  EXPECT_EQ(b.to_double(1), 1.015625);
}

TEST(CastKernels, LargeTensorsOnThreads) {
  for (auto [from, target] : {std::pair{DType::kF32, DType::kBF16}, std::pair{DType::kBF16, DType::kF32},
                              std::pair{DType::kF32, DType::kF16}, std::pair{DType::kF16, DType::kF64},
                              std::pair{DType::kI64, DType::kF32}, std::pair{DType::kBool, DType::kF32}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(target));
    Tensor x = random_of(from, {100003}, 5, -1000, 1000);
    expect_close(run_node("Cast", {x}, {{"to", to(target)}})[0], reference(target, {&x}, [](const double* e) { return e[0]; }),
                 0, 0);
  }
}

TEST(CastKernels, Cast1NamesTheTypeAsAString) {
  Tensor x = from_doubles(DType::kF32, {3}, {1.5, -2.5, 3});
  NodeSpec spec{.op = "Cast", .attrs = {{"to", Attribute::of_string("INT32")}}, .domain = "", .opset = 1};
  expect_close(run_node(spec, {x}, cpu_kernel_table())[0], from_doubles(DType::kI32, {3}, {1, -2, 3}), 0, 0);
  spec.attrs = {{"to", Attribute::of_string("NOT_A_TYPE")}};
  EXPECT_THROW(run_node(spec, {x}, cpu_kernel_table()), InvalidModel);
}

TEST(CastKernels, ErrorsNameTheNode) {
  Tensor x = random_of(DType::kF32, {2}, 1);
  EXPECT_THROW(run_node("Cast", {x}), InvalidModel);  // 'to' is required
  try {
    run_node("Cast", {x}, {{"to", Attribute::of_int(12)}});  // UINT32
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(Cast)"), std::string::npos) << m;
    EXPECT_NE(m.find("UINT32"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace trainrt
