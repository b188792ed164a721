// The random ops (random_kernels.cc): each draw's distribution over many elements (range, mean and
// spread, Bernoulli's rate per probability), one seed one stream whatever the thread count, and
// fresh draws from the run's seed without one.
#include <gtest/gtest.h>

#include <cmath>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"

namespace trainrt {
namespace {

constexpr int64_t kN = 200000;

NodeSpec spec(const char* op, std::map<std::string, Attribute> attrs, uint64_t run_seed = 1) {
  return NodeSpec{.op = op, .attrs = std::move(attrs), .opset = 22, .random_seed = run_seed};
}

struct Moments {
  double min = INFINITY, max = -INFINITY, mean = 0, sd = 0;
};
Moments moments(const Tensor& t) {
  Moments m;
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.to_double(i);
    m.min = std::min(m.min, v), m.max = std::max(m.max, v), sum += v, sum2 += v * v;
  }
  m.mean = sum / static_cast<double>(t.numel());
  m.sd = std::sqrt(sum2 / static_cast<double>(t.numel()) - m.mean * m.mean);
  return m;
}

TEST(RandomKernels, UniformCoversItsRangeEvenly) {
  const Tensor like = Tensor::zeros(DType::kF32, {kN});
  const Tensor u = run_node(spec("RandomUniformLike", {{"low", Attribute::of_float(-2.f)},
                                                       {"high", Attribute::of_float(3.f)}}), {like}, cpu_kernel_table())[0];
  ASSERT_EQ(u.dtype(), DType::kF32);
  const Moments m = moments(u);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LT(m.max, 3.0);
  EXPECT_NEAR(m.mean, 0.5, 0.02);                 // (low + high) / 2; sd of the mean 0.003
  EXPECT_NEAR(m.sd, 5.0 / std::sqrt(12.0), 0.01);  // (high - low) / sqrt(12)
}

TEST(RandomKernels, NormalHasItsMeanAndScale) {
  const Tensor n = run_node(spec("RandomNormal", {{"shape", Attribute::of_ints({kN})},
                                                  {"mean", Attribute::of_float(1.5f)},
                                                  {"scale", Attribute::of_float(2.f)},
                                                  {"dtype", Attribute::of_int(11)}}),  // f64
                            {}, cpu_kernel_table())[0];
  ASSERT_EQ(n.dtype(), DType::kF64);
  const Moments m = moments(n);
  EXPECT_NEAR(m.mean, 1.5, 0.02);
  EXPECT_NEAR(m.sd, 2.0, 0.02);
  int64_t beyond_3sd = 0;
  for (int64_t i = 0; i < n.numel(); ++i) beyond_3sd += std::abs(n.to_double(i) - 1.5) > 6.0;
  EXPECT_NEAR(static_cast<double>(beyond_3sd) / kN, 0.0027, 0.001);  // a normal's tails, not a uniform's
}

TEST(RandomKernels, BernoulliDrawsOnesAtEachElementsRate) {
  Tensor p = Tensor::empty(DType::kF32, {kN});
  for (int64_t i = 0; i < kN; ++i) p.data<float>()[i] = i % 4 == 0 ? 0.f : i % 4 == 1 ? 1.f : i % 4 == 2 ? 0.25f : 0.8f;
  const Tensor b = run_node(spec("Bernoulli", {}), {p}, cpu_kernel_table())[0];
  double ones[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < kN; ++i) {
    const double v = b.to_double(i);
    ASSERT_TRUE(v == 0.0 || v == 1.0) << i;
    ones[i % 4] += v;
  }
  EXPECT_EQ(ones[0], 0);
  EXPECT_EQ(ones[1], kN / 4);
  EXPECT_NEAR(ones[2] / (kN / 4), 0.25, 0.01);
  EXPECT_NEAR(ones[3] / (kN / 4), 0.8, 0.01);
  const Tensor as_bool = run_node(spec("Bernoulli", {{"dtype", Attribute::of_int(9)}}), {p}, cpu_kernel_table())[0];
  EXPECT_EQ(as_bool.dtype(), DType::kBool);
}

TEST(RandomKernels, OneSeedOneStreamFreshDrawsWithout) {
  const Tensor like = Tensor::zeros(DType::kBF16, {3, 5000});
  auto draw = [&](std::map<std::string, Attribute> attrs, uint64_t run_seed) {
    return run_node(spec("RandomNormalLike", std::move(attrs), run_seed), {like}, cpu_kernel_table())[0];
  };
  const Tensor seeded = draw({{"seed", Attribute::of_float(7.f)}}, 1);
  ASSERT_EQ(seeded.dtype(), DType::kBF16);
  testing::expect_same(draw({{"seed", Attribute::of_float(7.f)}}, 2), seeded);  // the attribute wins
  const Tensor a = draw({}, 1), b = draw({}, 2);
  int64_t same = 0;
  for (int64_t i = 0; i < a.numel(); ++i) same += a.to_double(i) == b.to_double(i);
  EXPECT_LT(same, a.numel() / 50);  // bf16 values collide now and then
  // The same run seed on one thread draws the same values as on the pool.
  Graph g;
  g.set_opset("", 22);
  Node* node = g.add_node("RandomNormalLike", {g.add_input("like", DType::kBF16, Shape::of(like.dims()))}, {"y"});
  KernelFn kernel = cpu_kernel_table().create(*node);
  Tensor y = Tensor::empty(DType::kBF16, like.dims());
  const Tensor* in[] = {&like};
  Tensor* out[] = {&y};
  ThreadPool one(1);
  KernelContext ctx;
  ctx.inputs = in;
  ctx.outputs = out;
  ctx.pool = &one;
  ctx.random_seed = 1;
  kernel(ctx);
  testing::expect_same(y, a);
}

}  // namespace
}  // namespace trainrt
