// Softmax and LogSoftmax kernels against a double-precision reference.
#include <cmath>
#include <limits>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;
using testing::expect_values;
using testing::random_tensor;

// Softmax (or log-softmax) of x viewed as (outer, n, inner), along n, in double.
std::vector<double> reference(const Tensor& x, bool log, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const auto at = [&](int64_t r) { return (o * n + r) * inner + j; };
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t r = 0; r < n; ++r) m = std::max(m, x.to_double(at(r)));
      for (int64_t r = 0; r < n; ++r) s += std::exp(x.to_double(at(r)) - m);
      for (int64_t r = 0; r < n; ++r) {
        const double v = x.to_double(at(r)) - m;
        y[static_cast<size_t>(at(r))] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  }
  return y;
}

Tensor softmax(const std::string& op, const Tensor& x, int64_t axis, int opset = 13) {
  NodeSpec spec{.op = op, .attrs = {{"axis", Attribute::of_int(axis)}}, .opset = opset};
  return run_node(spec, {x}, cpu_kernel_table())[0];
}


Tensor to_f64(const Tensor& x) {
  Tensor y = Tensor::empty(DType::kF64, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = x.to_double(i);
  return y;
}

Tensor to_16bit(const Tensor& x, DType t) {
  Tensor y = Tensor::empty(t, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    y.data<uint16_t>()[i] = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
  }
  return y;
}

TEST(SoftmaxKernels, EveryAxisOfOddShapes) {
  const Tensor x = random_tensor({3, 17, 5}, 1, -4.f, 4.f);
  const int64_t dims[] = {3, 17, 5};
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t k = 0; k < 3; ++k) (k < a ? outer : inner) *= k == a ? 1 : dims[k];
      const Tensor y = softmax(op, x, axis);
      EXPECT_EQ(y.dims(), x.dims());
      expect_values(y, reference(x, std::string(op) == "LogSoftmax", outer, dims[a], inner), 2e-6, 1e-7,
                    fmt(op, " axis ", axis));
    }
  }
}

TEST(SoftmaxKernels, DefaultAxisIsLastFromOpset13) {
  const Tensor x = random_tensor({4, 33}, 2, -3.f, 3.f);
  const Tensor y = run_node("Softmax", {x})[0];
  expect_values(y, reference(x, false, 4, 33, 1), 2e-6, 1e-8, "default axis");
}

TEST(SoftmaxKernels, OldOpsetsCoerceTo2D) {
  // Before opset 13, axis 1 of (2, 3, 4) means rows of 3 * 4 = 12 elements.
  const Tensor x = random_tensor({2, 3, 4}, 3, -2.f, 2.f);
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    NodeSpec spec{.op = op, .opset = 11};  // default axis 1
    expect_values(run_node(spec, {x}, cpu_kernel_table())[0],
                  reference(x, std::string(op) == "LogSoftmax", 2, 12, 1), 2e-6, 1e-7, fmt(op, "-11"));
    expect_values(softmax(op, x, 0, 11), reference(x, std::string(op) == "LogSoftmax", 1, 24, 1), 2e-6, 1e-7,
                  fmt(op, "-11 axis 0"));
  }
}

TEST(SoftmaxKernels, LargeAndInfiniteInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = make_tensor<float>({2, 4}, {0, 1, 2, 3, 10000, 10001, 10002, -inf});
  const Tensor y = softmax("Softmax", x, -1);
  expect_values(y, reference(x, false, 2, 4, 1), 2e-6, 1e-8, "softmax");
  EXPECT_EQ(y.to_double(7), 0.0);
  const Tensor l = softmax("LogSoftmax", x, -1);
  EXPECT_TRUE(std::isinf(l.to_double(7)) && l.to_double(7) < 0);
  expect_values(softmax("LogSoftmax", x, 0), reference(x, true, 1, 2, 4), 2e-6, 1e-6, "log-softmax columns");
}

TEST(SoftmaxKernels, DoubleAndSixteenBitTypes) {
  const Tensor x = random_tensor({6, 21, 7}, 4, -3.f, 3.f);
  for (int64_t axis : {1, 2}) {
    const int64_t outer = axis == 1 ? 6 : 6 * 21, n = axis == 1 ? 21 : 7, inner = axis == 1 ? 7 : 1;
    for (bool log : {false, true}) {
      const char* op = log ? "LogSoftmax" : "Softmax";
      const Tensor d = to_f64(x);
      expect_values(softmax(op, d, axis), reference(d, log, outer, n, inner), 1e-13, 1e-15, fmt(op, " f64"));
      for (DType t : {DType::kF16, DType::kBF16}) {
        const Tensor h = to_16bit(x, t);
        const Tensor y = softmax(op, h, axis);
        ASSERT_EQ(y.dtype(), t);
        // Computed in float from the rounded inputs; only the output rounding remains.
        expect_values(y, reference(h, log, outer, n, inner), t == DType::kF16 ? 1e-3 : 8e-3, 1e-4,
                      fmt(op, " ", dtype_name(t), " axis ", axis));
      }
    }
  }
}

TEST(SoftmaxKernels, LargeInputsTakeTheParallelPaths) {
  const Tensor rows = random_tensor({257, 1001}, 5, -5.f, 5.f);
  const Tensor slab = random_tensor({3, 513, 97}, 6, -5.f, 5.f);
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    expect_values(softmax(op, rows, 1), reference(rows, log, 257, 1001, 1), 2e-6, 1e-9, fmt(op, " rows"));
    expect_values(softmax(op, slab, 1), reference(slab, log, 3, 513, 97), 2e-6, 1e-9, fmt(op, " slab"));
  }
}

TEST(SoftmaxKernels, InPlaceWhenOutputAliasesInput) {
  // The schema allows y over x; run the kernel with the output bound to the input's buffer.
  Tensor x = random_tensor({5, 37}, 7, -2.f, 2.f);
  const std::vector<double> expected = reference(x, false, 5, 37, 1);
  Graph g;
  g.set_opset("", 13);
  Node* node = g.add_node("Softmax", {g.add_input("x", DType::kF32, Shape::of({5, 37}))}, {"y"});
  KernelFn kernel = cpu_kernel_table().create(*node);
  const Tensor* in[] = {&x};
  Tensor* out[] = {&x};
  KernelContext ctx{.inputs = in, .outputs = out};
  kernel(ctx);
  expect_values(x, expected, 2e-6, 1e-8, "in place");
}

TEST(SoftmaxKernels, AxisOutOfRangeNamesTheNode) {
  try {
    softmax("Softmax", random_tensor({2, 3}, 8), 2);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(Softmax)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
