// BatchNormalization and BatchNormalizationGrad kernels against double-precision references.
#include <cmath>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

using testing::expect_values;
using testing::random_tensor;

// Per channel statistics of x (N, C, S...) in double: mean and biased variance.
struct Stats {
  std::vector<double> mean, var;
};
Stats channel_stats(const Tensor& x) {
  const int64_t n = x.dims()[0], c = x.dims()[1], s = x.numel() / (n * c);
  Stats st{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < s; ++i) st.mean[ch] += x.to_double((b * c + ch) * s + i);
    st.mean[ch] /= static_cast<double>(n * s);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < s; ++i) st.var[ch] += std::pow(x.to_double((b * c + ch) * s + i) - st.mean[ch], 2);
    st.var[ch] /= static_cast<double>(n * s);
  }
  return st;
}

// y = (x - mean) / sqrt(var + eps) * scale + b, channel = dim 1.
std::vector<double> normalized(const Tensor& x, const Stats& st, const Tensor& scale, const Tensor& b, double eps) {
  const int64_t c = x.dims()[1], s = x.numel() / (x.dims()[0] * c);
  std::vector<double> y;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = i / s % c;
    y.push_back((x.to_double(i) - st.mean[ch]) / std::sqrt(st.var[ch] + eps) * scale.to_double(ch) + b.to_double(ch));
  }
  return y;
}

NodeSpec batch_norm_spec(bool training, float epsilon = 1e-5f, float momentum = 0.9f) {
  return NodeSpec{.op = "BatchNormalization",
                  .attrs = {{"epsilon", Attribute::of_float(epsilon)},
                            {"momentum", Attribute::of_float(momentum)},
                            {"training_mode", Attribute::of_int(training ? 1 : 0)}},
                  .num_outputs = training ? 3 : 1,
                  .opset = 15};
}

TEST(BatchNormKernels, TrainingModeEveryRank) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{6, 4}, {3, 4, 7}, {2, 4, 5, 6}, {2, 4, 3, 2, 5}, {64, 5, 9}}) {
    const Tensor x = random_tensor(dims, 1, -2.f, 4.f);  // a mean far from 0 on purpose
    const int64_t c = dims[1];
    const Tensor scale = random_tensor({c}, 2), b = random_tensor({c}, 3);
    const Tensor mean = random_tensor({c}, 4), var = random_tensor({c}, 5, 0.5f, 2.f);
    const std::vector<Tensor> out = run_node(batch_norm_spec(true, 1e-3f, 0.8f), {x, scale, b, mean, var},
                                             cpu_kernel_table());
    const Stats st = channel_stats(x);
    const std::string what = to_string(dims);
    expect_values(out[0], normalized(x, st, scale, b, static_cast<double>(1e-3f)), 1e-5, 1e-5, what + " Y");
    std::vector<double> running_mean, running_var;
    const double m = static_cast<double>(0.8f);
    for (int64_t ch = 0; ch < c; ++ch) {
      running_mean.push_back(mean.to_double(ch) * m + st.mean[ch] * (1 - m));
      running_var.push_back(var.to_double(ch) * m + st.var[ch] * (1 - m));
    }
    expect_values(out[1], running_mean, 1e-5, 1e-6, what + " running_mean");
    expect_values(out[2], running_var, 1e-5, 1e-6, what + " running_var");
  }
}

TEST(BatchNormKernels, EvalModeUsesTheGivenStatistics) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{5, 3}, {2, 3, 4, 5}}) {
    const Tensor x = random_tensor(dims, 6);
    const Tensor scale = random_tensor({3}, 7), b = random_tensor({3}, 8);
    const Tensor mean = random_tensor({3}, 9), var = random_tensor({3}, 10, 0.1f, 2.f);
    const Tensor y = run_node(batch_norm_spec(false), {x, scale, b, mean, var}, cpu_kernel_table())[0];
    Stats st;
    for (int64_t ch = 0; ch < 3; ++ch) {
      st.mean.push_back(mean.to_double(ch));
      st.var.push_back(var.to_double(ch));
    }
    expect_values(y, normalized(x, st, scale, b, static_cast<double>(1e-5f)), 1e-5, 1e-6, to_string(dims));
  }
}

TEST(BatchNormKernels, LargeInputsTakeTheParallelPathInDouble) {
  Tensor x32 = random_tensor({16, 8, 40, 40}, 11, -1.f, 3.f);
  Tensor x = Tensor::empty(DType::kF64, x32.dims());
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = x32.data<float>()[i];
  Tensor p = Tensor::empty(DType::kF64, {8});
  for (int64_t i = 0; i < 8; ++i) p.data<double>()[i] = 0.5 + 0.1 * static_cast<double>(i);
  const std::vector<Tensor> out = run_node(batch_norm_spec(true), {x, p, p, p, p}, cpu_kernel_table());
  ASSERT_EQ(out[0].dtype(), DType::kF64);
  expect_values(out[0], normalized(x, channel_stats(x), p, p, static_cast<double>(1e-5f)), 1e-10, 1e-10, "f64 Y");
}

TEST(BatchNormKernels, BadChannelCountNamesTheNodeAndInput) {
  const Tensor x = random_tensor({2, 3, 4}, 12), c3 = random_tensor({3}, 13), c4 = random_tensor({4}, 14);
  try {
    run_node(batch_norm_spec(false), {x, c3, c3, c4, c3}, cpu_kernel_table());
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNormalization"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("input 3"), std::string::npos) << e.what();
  }
}

// dX, dScale, dBias of the training-mode forward, from the formulas of the kernel's header
// written out directly in double; and the eval-mode map of given statistics. Shapes cover the
// kernel's channel loops: rows of 16 (4x4 maps), rows with a scalar tail (5x5, 7x7, 10), a channel
// longer than one float partial sum (64 x 8x8 = 4096 values), and (N, C) columns.
void check_grad_against_reference(const std::vector<int64_t>& dims) {
  const Tensor x = random_tensor(dims, 15, -1.f, 2.f), dy = random_tensor(dims, 16);
  const int64_t c = dims[1], s = x.numel() / (dims[0] * c), m = dims[0] * s;
  const Tensor scale = random_tensor({c}, 17);
  const Stats st = channel_stats(x);
  for (bool training : {true, false}) {
    NodeSpec spec{.op = "BatchNormalizationGrad",
                  .attrs = {{"training_mode", Attribute::of_int(training ? 1 : 0)}},
                  .num_outputs = 3,
                  .domain = std::string(kTrainrtDomain)};
    std::vector<Tensor> in{dy, x, scale};
    std::vector<double> inv_std(c);
    for (int64_t ch = 0; ch < c; ++ch) inv_std[ch] = 1 / std::sqrt(st.var[ch] + static_cast<double>(1e-5f));
    if (!training) {  // eval: statistics given (here the batch's own, any fixed values would do)
      Tensor mean_t = Tensor::empty(DType::kF32, {c}), inv_t = Tensor::empty(DType::kF32, {c});
      for (int64_t ch = 0; ch < c; ++ch) {
        mean_t.data<float>()[ch] = static_cast<float>(st.mean[ch]);
        inv_t.data<float>()[ch] = static_cast<float>(inv_std[ch]);
      }
      in.push_back(mean_t);
      in.push_back(inv_t);
    }
    const std::vector<Tensor> out = run_node(spec, in, cpu_kernel_table());
    std::vector<double> sum_dy(c, 0.0), sum_dy_xhat(c, 0.0), dx(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t ch = i / s % c;
      sum_dy[ch] += dy.to_double(i);
      sum_dy_xhat[ch] += dy.to_double(i) * (x.to_double(i) - st.mean[ch]) * inv_std[ch];
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t ch = i / s % c;
      const double xhat = (x.to_double(i) - st.mean[ch]) * inv_std[ch];
      const double k = scale.to_double(ch) * inv_std[ch];
      dx[i] = training ? k * (dy.to_double(i) - sum_dy[ch] / m - xhat * sum_dy_xhat[ch] / m) : k * dy.to_double(i);
    }
    const std::string what = to_string(dims) + (training ? " training" : " eval");
    expect_values(out[0], dx, 1e-4, 1e-5, what + " dX");
    expect_values(out[1], sum_dy_xhat, 1e-4, 1e-4, what + " dScale");
    expect_values(out[2], sum_dy, 1e-5, 1e-4, what + " dBias");
  }
}

TEST(BatchNormGradKernels, TrainingAndEvalAgainstReference) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{3, 4, 5, 2}, {8, 6, 4, 4}, {5, 3, 5, 5}, {2, 3, 7, 7},
                                    {64, 3, 8, 8}, {9, 5}, {4, 3, 1, 1}})
    check_grad_against_reference(dims);
}

// Training-mode Y on the same shapes (the forward's channel sums and its row-order normalize).
TEST(BatchNormKernels, TrainingModeOnConvShapes) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{8, 6, 4, 4}, {5, 3, 5, 5}, {64, 3, 8, 8}, {2, 3, 33, 1}}) {
    const Tensor x = random_tensor(dims, 18, -2.f, 4.f);
    const int64_t c = dims[1];
    const Tensor scale = random_tensor({c}, 19), b = random_tensor({c}, 20);
    const Tensor mean = random_tensor({c}, 21), var = random_tensor({c}, 22, 0.5f, 2.f);
    const Tensor y = run_node(batch_norm_spec(true), {x, scale, b, mean, var}, cpu_kernel_table())[0];
    expect_values(y, normalized(x, channel_stats(x), scale, b, static_cast<double>(1e-5f)), 1e-5, 1e-5,
                  to_string(dims));
  }
}

// The schema lets dX be written over dY: with output 0 aliasing input 0 the kernel gives the bits of
// separate buffers, on the per-channel path (S > 1) and on the (N, C) columns, in both modes.
TEST(BatchNormGradKernels, DxWrittenOverDyMatchesSeparateBuffers) {
  const OpSchema* schema = OpRegistry::global().find(std::string(kTrainrtDomain), "BatchNormalizationGrad");
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->inplace, (std::vector<std::pair<int, int>>{{0, 0}}));
  for (std::vector<int64_t> dims : {std::vector<int64_t>{8, 6, 4, 4}, {64, 3, 8, 8}, {9, 5}}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(to_string(dims) + (training ? " training" : " eval"));
      const int64_t c = dims[1];
      std::vector<Tensor> inputs{random_tensor(dims, 21), random_tensor(dims, 22), random_tensor({c}, 23)};
      if (!training) {
        inputs.push_back(random_tensor({c}, 24));
        inputs.push_back(random_tensor({c}, 25, 0.5f, 2.f));
      }
      NodeSpec spec{.op = "BatchNormalizationGrad",
                    .attrs = {{"training_mode", Attribute::of_int(training ? 1 : 0)}},
                    .num_outputs = 3,
                    .domain = std::string(kTrainrtDomain)};
      const std::vector<Tensor> want = run_node(spec, inputs, cpu_kernel_table());

      Graph g;
      std::vector<Value*> values;
      std::vector<Tensor> copies;
      for (size_t i = 0; i < inputs.size(); ++i) {
        copies.push_back(inputs[i].clone());
        values.push_back(g.add_initializer("in" + std::to_string(i), copies.back()));
      }
      Node* node = g.add_node(spec.op, values, {"dx", "dscale", "dbias"}, kTrainrtDomain);
      for (const auto& [name, a] : spec.attrs) node->set_attr(name, a);
      KernelFn kernel = cpu_kernel_table().create(*node);
      Tensor dscale = Tensor::empty(DType::kF32, {c}), dbias = Tensor::empty(DType::kF32, {c});
      std::vector<const Tensor*> in_ptrs;
      for (const Tensor& t : copies) in_ptrs.push_back(&t);
      std::vector<Tensor*> out_ptrs = {&copies[0], &dscale, &dbias};
      KernelContext ctx;
      ctx.inputs = in_ptrs;
      ctx.outputs = out_ptrs;
      kernel(ctx);
      testing::expect_close(copies[0], want[0], 0, 0);
      testing::expect_close(dscale, want[1], 0, 0);
      testing::expect_close(dbias, want[2], 0, 0);
    }
  }
}

// The schema lets Y be written over X: with output 0 aliasing input 0 the kernel gives the bits of
// separate buffers (statistics first, then Y element by element), on both paths and in both modes.
TEST(BatchNormKernels, YWrittenOverXMatchesSeparateBuffers) {
  const OpSchema* schema = OpRegistry::global().find("", "BatchNormalization");
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->inplace, (std::vector<std::pair<int, int>>{{0, 0}}));
  for (std::vector<int64_t> dims : {std::vector<int64_t>{8, 6, 4, 4}, {64, 3, 8, 8}, {9, 5}}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(to_string(dims) + (training ? " training" : " eval"));
      const int64_t c = dims[1];
      const std::vector<Tensor> inputs{random_tensor(dims, 26), random_tensor({c}, 27), random_tensor({c}, 28),
                                       random_tensor({c}, 29), random_tensor({c}, 30, 0.5f, 2.f)};
      const NodeSpec spec = batch_norm_spec(training);
      const std::vector<Tensor> want = run_node(spec, inputs, cpu_kernel_table());
      Graph g;
      g.set_opset("", 15);
      std::vector<Value*> values;
      std::vector<Tensor> copies;
      for (size_t i = 0; i < inputs.size(); ++i) {
        copies.push_back(inputs[i].clone());
        values.push_back(g.add_initializer("in" + std::to_string(i), copies.back()));
      }
      std::vector<std::string> names{"y"};
      if (training) names = {"y", "running_mean", "running_var"};
      Node* node = g.add_node(spec.op, values, names);
      for (const auto& [name, a] : spec.attrs) node->set_attr(name, a);
      KernelFn kernel = cpu_kernel_table().create(*node);
      Tensor running_mean = Tensor::empty(DType::kF32, {c}), running_var = Tensor::empty(DType::kF32, {c});
      std::vector<const Tensor*> in_ptrs;
      for (const Tensor& t : copies) in_ptrs.push_back(&t);
      std::vector<Tensor*> out_ptrs = {&copies[0]};
      if (training) out_ptrs = {&copies[0], &running_mean, &running_var};
      KernelContext ctx;
      ctx.inputs = in_ptrs;
      ctx.outputs = out_ptrs;
      kernel(ctx);
      testing::expect_close(copies[0], want[0], 0, 0);
      if (training) {
        testing::expect_close(running_mean, want[1], 0, 0);
        testing::expect_close(running_var, want[2], 0, 0);
      }
    }
  }
}

}  // namespace
}  // namespace trainrt
