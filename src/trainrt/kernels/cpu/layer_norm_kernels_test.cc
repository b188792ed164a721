// LayerNormalization kernel against a double-precision reference.
#include <cmath>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_values;
using testing::random_tensor;

struct Reference {
  std::vector<double> y, mean, inv_std;
};

// x as (rows, cols); scale and bias (may be undefined) indexed by a callback that maps
// (row, col) to their element, so broadcast shapes need no special code here.
template <typename Index>
Reference reference(const Tensor& x, int64_t cols, const Tensor& scale, const Tensor& bias, double epsilon,
                    Index param_index) {
  Reference r;
  const int64_t rows = x.numel() / cols;
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x.to_double(i * cols + j);
    mean /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) var += std::pow(x.to_double(i * cols + j) - mean, 2);
    const double inv_std = 1 / std::sqrt(var / static_cast<double>(cols) + epsilon);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t p = param_index(i, j);
      r.y.push_back((x.to_double(i * cols + j) - mean) * inv_std * scale.to_double(p) +
                    (bias.defined() ? bias.to_double(p) : 0.0));
    }
    r.mean.push_back(mean);
    r.inv_std.push_back(inv_std);
  }
  return r;
}

std::vector<Tensor> layer_norm(const std::vector<Tensor>& inputs, int64_t axis, float epsilon = 1e-5f) {
  NodeSpec spec{.op = "LayerNormalization",
                .attrs = {{"axis", Attribute::of_int(axis)}, {"epsilon", Attribute::of_float(epsilon)}},
                .num_outputs = 3,
                .opset = 17};
  return run_node(spec, inputs, cpu_kernel_table());
}


TEST(LayerNormKernels, EveryAxisWithAndWithoutBias) {
  const Tensor x = random_tensor({2, 3, 5, 7}, 1, -3.f, 5.f);  // a mean far from 0 on purpose
  for (int64_t axis : {0, 1, 2, 3, -1, -3}) {
    const int64_t a = axis < 0 ? axis + 4 : axis;
    std::vector<int64_t> norm_dims(x.dims().begin() + a, x.dims().end());
    const int64_t cols = numel_of(norm_dims);
    const Tensor scale = random_tensor(norm_dims, 2);
    const Tensor bias = random_tensor(norm_dims, 3);
    for (bool with_bias : {true, false}) {
      const std::vector<Tensor> out = layer_norm({x, scale, with_bias ? bias : Tensor()}, axis);
      const Reference r = reference(x, cols, scale, with_bias ? bias : Tensor(), 1e-5,
                                    [&](int64_t, int64_t j) { return j; });
      const std::string what = fmt("axis ", axis, with_bias ? " with bias" : " without bias");
      std::vector<int64_t> stat_dims = x.dims();
      for (int64_t k = a; k < 4; ++k) stat_dims[static_cast<size_t>(k)] = 1;
      EXPECT_EQ(out[1].dims(), stat_dims) << what;
      EXPECT_EQ(out[1].dtype(), DType::kF32) << what;
      expect_values(out[0], r.y, 1e-5, 1e-5, what + " Y");
      expect_values(out[1], r.mean, 1e-5, 1e-6, what + " Mean");
      expect_values(out[2], r.inv_std, 1e-5, 1e-6, what + " InvStdDev");
    }
  }
}

TEST(LayerNormKernels, EpsilonAndConstantRows) {
  // A constant row has variance 0: inv_std = 1 / sqrt(epsilon), y = bias.
  const Tensor x = testing::make_tensor<float>({2, 3}, {4, 4, 4, 1, 2, 3});
  const Tensor scale = testing::make_tensor<float>({3}, {1, 2, 3});
  const Tensor bias = testing::make_tensor<float>({3}, {0.5f, 0, -1});
  const std::vector<Tensor> out = layer_norm({x, scale, bias}, -1, 0.1f);
  const Reference r = reference(x, 3, scale, bias, static_cast<double>(0.1f), [](int64_t, int64_t j) { return j; });
  expect_values(out[0], r.y, 1e-6, 1e-6, "Y");
  expect_values(out[2], r.inv_std, 1e-6, 0, "InvStdDev");
}

TEST(LayerNormKernels, BroadcastScaleAndBias) {
  const Tensor x = random_tensor({4, 3, 6}, 4);
  // Scale (1, 6) and bias (3, 1) over the normalized dims (3, 6); then a scale that varies with
  // the leading dim too, (4, 1, 1).
  const Tensor scale = random_tensor({1, 6}, 5);
  const Tensor bias = random_tensor({3, 1}, 6);
  std::vector<Tensor> out = layer_norm({x, scale, bias}, 1);
  Reference r = reference(x, 18, scale, Tensor(), 1e-5, [](int64_t, int64_t j) { return j % 6; });
  for (int64_t i = 0; i < 72; ++i) r.y[static_cast<size_t>(i)] += bias.to_double(i % 18 / 6);
  expect_values(out[0], r.y, 1e-5, 1e-5, "(1, 6) scale, (3, 1) bias");

  const Tensor per_row = random_tensor({4, 1, 1}, 7);
  out = layer_norm({x, per_row}, 1);
  r = reference(x, 18, per_row, Tensor(), 1e-5, [](int64_t i, int64_t) { return i; });
  expect_values(out[0], r.y, 1e-5, 1e-5, "(4, 1, 1) scale");
}

TEST(LayerNormKernels, DoubleAndSixteenBitTypes) {
  const Tensor x = random_tensor({5, 3, 40}, 8, -2.f, 2.f);
  const Tensor scale = random_tensor({40}, 9), bias = random_tensor({40}, 10);
  for (DType t : {DType::kF64, DType::kF16, DType::kBF16}) {
    const auto cast = [&](const Tensor& f) {
      Tensor c = Tensor::empty(t, f.dims());
      for (int64_t i = 0; i < f.numel(); ++i) {
        const float v = f.data<float>()[i];
        if (t == DType::kF64) c.data<double>()[i] = v;
        else c.data<uint16_t>()[i] = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      }
      return c;
    };
    const Tensor xt = cast(x), st = cast(scale), bt = cast(bias);
    const std::vector<Tensor> out = layer_norm({xt, st, bt}, -1);
    ASSERT_EQ(out[0].dtype(), t);
    EXPECT_EQ(out[1].dtype(), DType::kF32);
    const Reference r = reference(xt, 40, st, bt, 1e-5, [](int64_t, int64_t j) { return j; });
    const double tol = t == DType::kF64 ? 1e-7 : t == DType::kF16 ? 4e-3 : 3e-2;
    expect_values(out[0], r.y, tol, tol, fmt(dtype_name(t), " Y"));
    expect_values(out[1], r.mean, 1e-6, 1e-6, fmt(dtype_name(t), " Mean"));
  }
}

TEST(LayerNormKernels, BFloat16StashType) {
  const Tensor x = random_tensor({3, 8}, 11), scale = random_tensor({8}, 12);
  NodeSpec spec{.op = "LayerNormalization", .attrs = {{"stash_type", Attribute::of_int(16)}}, .num_outputs = 3,
                .opset = 17};
  const std::vector<Tensor> out = run_node(spec, {x, scale}, cpu_kernel_table());
  EXPECT_EQ(out[1].dtype(), DType::kBF16);
  const Reference r = reference(x, 8, scale, Tensor(), 1e-5, [](int64_t, int64_t j) { return j; });
  expect_values(out[2], r.inv_std, 8e-3, 0, "bf16 InvStdDev");
}

TEST(LayerNormKernels, OnlyYWanted) {
  const Tensor x = random_tensor({4, 9}, 13), scale = random_tensor({9}, 14);
  const Tensor y = run_node("LayerNormalization", {x, scale})[0];
  expect_values(y, reference(x, 9, scale, Tensor(), 1e-5, [](int64_t, int64_t j) { return j; }).y, 1e-5, 1e-5,
                "Y only");
}

TEST(LayerNormKernels, LargeInputsTakeTheParallelPath) {
  const Tensor x = random_tensor({300, 768}, 15, -1.f, 3.f);
  const Tensor scale = random_tensor({768}, 16), bias = random_tensor({768}, 17);
  const std::vector<Tensor> out = layer_norm({x, scale, bias}, -1);
  const Reference r = reference(x, 768, scale, bias, 1e-5, [](int64_t, int64_t j) { return j; });
  expect_values(out[0], r.y, 1e-5, 1e-5, "Y");
  expect_values(out[2], r.inv_std, 1e-5, 0, "InvStdDev");
}

TEST(LayerNormKernels, ScaleThatDoesNotBroadcastNamesTheNode) {
  try {
    layer_norm({random_tensor({2, 6}, 18), random_tensor({5}, 19)}, -1);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(LayerNormalization)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
