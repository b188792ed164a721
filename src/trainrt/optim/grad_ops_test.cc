#include "trainrt/optim/grad_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "trainrt/core/error.h"
#include "trainrt/optim/optim_testing.h"

namespace trainrt {
namespace {

using testing::expect_close_to;
using testing::kReferenceShapes;
using testing::OptimProblem;
using testing::to_doubles;

double reference_norm(const OptimProblem& problem) {
  long double sum = 0;
  for (const Tensor& g : problem.grads)
    for (int64_t i = 0; i < g.numel(); ++i) sum += static_cast<long double>(g.data<float>()[i]) * g.data<float>()[i];
  return static_cast<double>(std::sqrt(sum));
}

TEST(GradNormTest, MatchesLongDoubleReference) {
  OptimProblem problem(kReferenceShapes, 4);
  problem.fill_grads(3);
  const double expected = reference_norm(problem);
  EXPECT_NEAR(grad_norm(problem.slots()), expected, 1e-13 * expected);
}

TEST(GradNormTest, EmptyListIsZero) { EXPECT_EQ(grad_norm({}), 0.0); }

TEST(GradNormTest, NonFiniteGradientsGiveNonFiniteNorm) {
  OptimProblem problem({{100}}, 1);
  problem.fill_grads(1);
  problem.grads[0].data<float>()[17] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(grad_norm(problem.slots())));
  EXPECT_EQ(clip_scale(grad_norm(problem.slots()), 1.0), 0.f);
  problem.grads[0].data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(grad_norm(problem.slots())));
  EXPECT_TRUE(std::isnan(clip_scale(grad_norm(problem.slots()), 1.0)));
}

TEST(UnscaledGradNormTest, NormTimesInverseScaleAndOverflowCheck) {
  OptimProblem problem(kReferenceShapes, 5);
  problem.fill_grads(1);
  const double expected = reference_norm(problem) / 1024;
  GradNormCheck check = unscaled_grad_norm(problem.slots(), 1.0 / 1024);
  EXPECT_FALSE(check.found_inf);
  EXPECT_NEAR(check.norm, expected, 1e-13 * expected);
  problem.grads.back().data<float>()[12345] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(unscaled_grad_norm(problem.slots(), 1.0).found_inf);
  problem.grads.back().data<float>()[12345] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(unscaled_grad_norm(problem.slots(), 1.0).found_inf);
  // Finite f32 extremes do not overflow the double sum.
  problem.grads.back().data<float>()[12345] = std::numeric_limits<float>::max();
  EXPECT_FALSE(unscaled_grad_norm(problem.slots(), 1.0).found_inf);
}

TEST(ScaleGradsTest, ScalesEveryElement) {
  OptimProblem problem(kReferenceShapes, 6);
  problem.fill_grads(1);
  std::vector<std::vector<double>> expected;
  for (const Tensor& g : problem.grads) {
    expected.push_back(to_doubles(g));
    for (double& x : expected.back()) x = static_cast<float>(static_cast<float>(x) * 0.375f);
  }
  scale_grads(problem.slots(), 0.375f);
  for (size_t i = 0; i < problem.grads.size(); ++i) EXPECT_EQ(to_doubles(problem.grads[i]), expected[i]);
}

TEST(ClipTest, ScaleFollowsTorch) {
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.f);
  EXPECT_EQ(clip_scale(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
}

TEST(ClipTest, ClipGradNormScalesToMaxNorm) {
  OptimProblem problem(kReferenceShapes, 9);
  problem.fill_grads(2);
  const double before = reference_norm(problem);
  const double max_norm = before / 8;
  std::vector<std::vector<double>> expected;
  for (const Tensor& g : problem.grads) {
    expected.push_back(to_doubles(g));
    for (double& x : expected.back()) x = static_cast<float>(x * static_cast<float>(max_norm / (before + 1e-6)));
  }
  EXPECT_NEAR(clip_grad_norm(problem.slots(), max_norm), before, 1e-12 * before);
  for (size_t i = 0; i < problem.grads.size(); ++i) expect_close_to(problem.grads[i], expected[i], 0, problem.names[i]);
  EXPECT_NEAR(reference_norm(problem), max_norm, 1e-6 * max_norm);
}

TEST(ClipTest, NormBelowMaxLeavesGradientsAlone) {
  OptimProblem problem({{10}, {3}}, 9);
  problem.fill_grads(2);
  const std::vector<double> before = to_doubles(problem.grads[0]);
  clip_grad_norm(problem.slots(), 1e9);
  expect_close_to(problem.grads[0], before, 0, "grad");
}

TEST(AccumulateTest, AddsAndZeroes) {
  OptimProblem problem({{1000003}}, 5);
  problem.fill_grads(1);
  Tensor acc = Tensor::zeros(DType::kF32, {1000003});
  accumulate_grad(acc, problem.grads[0], "w");
  accumulate_grad(acc, problem.grads[0], "w");
  std::vector<double> twice = to_doubles(problem.grads[0]);
  for (double& x : twice) x *= 2;
  expect_close_to(acc, twice, 0, "acc");
  zero_grad(acc);
  expect_close_to(acc, std::vector<double>(1000003, 0.0), 0, "zeroed");
}

TEST(AccumulateTest, MismatchedShapeNamesParameter) {
  Tensor acc = Tensor::zeros(DType::kF32, {4}), g = Tensor::zeros(DType::kF32, {2, 2});
  try {
    accumulate_grad(acc, g, "fc.bias");
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc.bias'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
