// The fused activation-gradient kernels (ReluGrad, LeakyReluGrad, SigmoidGrad, TanhGrad, GeluGrad)
// against references in double on every float dtype, below and above the parallel threshold;
// GeluGrad against central differences of the Gelu kernel and on extreme inputs; dX over dY.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::from_doubles;
using testing::random_of;
using Attrs = std::map<std::string, Attribute>;

Tensor run_grad(const std::string& op, const Tensor& dy, const Tensor& v, const Attrs& attrs = {}) {
  return run_node({.op = op, .attrs = attrs, .domain = std::string(kTrainrtDomain)}, {dy, v}, cpu_kernel_table())[0];
}

double gelu_grad(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

struct Case {
  std::string op;
  Attrs attrs;
  double lo, hi;                          // range of input 1 (Y or X)
  std::function<double(double, double)> dx;  // (dY, V) -> dX
};

std::vector<Case> cases() {
  const double alpha = static_cast<double>(0.1f);
  return {
      {"ReluGrad", {}, -3, 3, [](double dy, double y) { return y <= 0 ? 0 : dy; }},
      {"LeakyReluGrad", {{"alpha", Attribute::of_float(0.1f)}}, -3, 3,
       [alpha](double dy, double v) { return v > 0 ? dy : alpha * dy; }},
      {"SigmoidGrad", {}, 0, 1, [](double dy, double y) { return dy * y * (1 - y); }},
      {"TanhGrad", {}, -1, 1, [](double dy, double y) { return dy * (1 - y * y); }},
      {"GeluGrad", {}, -6, 6, [](double dy, double x) { return dy * gelu_grad(x); }},
      {"GeluGrad", {{"approximate", Attribute::of_string("tanh")}}, -6, 6,
       [](double dy, double x) { return dy * gelu_tanh_grad(x); }},
  };
}

TEST(ElementwiseGradKernels, MatchReferencesOnEveryFloatDtype) {
  // Below the parallel threshold, above it (with a vector tail), and a scalar.
  const std::vector<std::vector<int64_t>> shapes = {{3, 50}, {70001}, {}};
  for (const Case& c : cases())
    for (DType t : testing::kFloatDTypes)
      for (const std::vector<int64_t>& dims : shapes) {
        SCOPED_TRACE(c.op + " " + std::string(dtype_name(t)) + " " + to_string(dims));
        const Tensor dy = random_of(t, dims, 1);
        const Tensor v = random_of(t, dims, 2, c.lo, c.hi);
        const Tensor want = testing::reference(t, {&dy, &v}, [&](const double* x) { return c.dx(x[0], x[1]); });
        // Half-precision results round once from f32; f32 GELU math is good to ~1e-6 (vector_math.h).
        const double tol = t == DType::kF64 ? 1e-12 : t == DType::kF32 ? 4e-6 : 4 * testing::dtype_rtol(t);
        expect_close(run_grad(c.op, dy, v, c.attrs), want, tol, tol);
      }
}

// Central differences of the f64 Gelu kernel: checks the derivative formulas themselves.
TEST(ElementwiseGradKernels, GeluGradIsTheDerivativeOfGelu) {
  std::vector<double> xs;
  for (double x = -7; x <= 7; x += 0.125) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  const double h = 1e-5;
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const Attrs attrs{{"approximate", Attribute::of_string(approximate)}};
    std::vector<double> up(xs), down(xs);
    for (int64_t i = 0; i < n; ++i) up[i] += h, down[i] -= h;
    const Tensor yu = run_node("Gelu", {from_doubles(DType::kF64, {n}, up)}, attrs)[0];
    const Tensor yd = run_node("Gelu", {from_doubles(DType::kF64, {n}, down)}, attrs)[0];
    std::vector<double> numeric(xs.size());
    for (int64_t i = 0; i < n; ++i) numeric[i] = (yu.to_double(i) - yd.to_double(i)) / (2 * h);
    const Tensor ones = from_doubles(DType::kF64, {n}, std::vector<double>(xs.size(), 1.0));
    const Tensor got = run_grad("GeluGrad", ones, from_doubles(DType::kF64, {n}, xs), attrs);
    expect_close(got, from_doubles(DType::kF64, {n}, numeric), 1e-8, 1e-9);
  }
}

// Huge, tiny and boundary inputs stay finite in f32 and meet the limits (0 below, 1 above).
TEST(ElementwiseGradKernels, GeluGradHandlesExtremeInputs) {
  const std::vector<double> xs = {-1e30, -1e10, -40, -12.5, -11.9, -5, -1e-30, 0, 1e-30, 5, 11.9, 12.5, 40, 1e10, 1e30};
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor ones = from_doubles(DType::kF32, {n}, std::vector<double>(xs.size(), 1.0));
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    const Tensor got = run_grad("GeluGrad", ones, from_doubles(DType::kF32, {n}, xs),
                                {{"approximate", Attribute::of_string(approximate)}});
    std::vector<double> want;
    for (double x : xs) want.push_back(std::string(approximate) == "none" ? gelu_grad(x) : gelu_tanh_grad(x));
    expect_close(got, from_doubles(DType::kF32, {n}, want), 2e-6, 1e-7);
  }
}

TEST(ElementwiseGradKernels, WriteOverDy) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.op);
    const Tensor dy = random_of(DType::kF32, {40000}, 3);
    const Tensor v = random_of(DType::kF32, {40000}, 4, c.lo, c.hi);
    const Tensor want = run_grad(c.op, dy, v, c.attrs);
    Graph g;
    g.set_opset(std::string(kTrainrtDomain), 1);
    Tensor inout = dy.clone();
    Node* node = g.add_node(c.op, {g.add_initializer("dy", inout), g.add_initializer("v", v)}, {"dx"}, kTrainrtDomain);
    for (const auto& [name, a] : c.attrs) node->set_attr(name, a);
    KernelFn kernel = cpu_kernel_table().create(*node);
    const std::vector<const Tensor*> in = {&inout, &v};
    const std::vector<Tensor*> out = {&inout};
    KernelContext ctx{.inputs = in, .outputs = out};
    kernel(ctx);
    expect_close(inout, want, 0, 0);
  }
}

TEST(ElementwiseGradKernels, RejectMismatchedInputs) {
  const Tensor a = random_of(DType::kF32, {2, 3}, 5);
  EXPECT_THROW(run_grad("ReluGrad", a, random_of(DType::kF32, {3, 2}, 6)), ShapeError);
  EXPECT_THROW(run_grad("TanhGrad", a, random_of(DType::kF64, {2, 3}, 7)), ShapeError);
  EXPECT_THROW(run_grad("GeluGrad", a, a, {{"approximate", Attribute::of_string("erf")}}), ShapeError);
  EXPECT_THROW(run_grad("SigmoidGrad", random_of(DType::kI64, {2}, 8), random_of(DType::kI64, {2}, 9)), ShapeError);
}

}  // namespace
}  // namespace trainrt
