#include "trainrt/optim/param_checks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

const StateBufferUse kMoments[] = {{&OptimizerState::exp_avg, "exp_avg"},
                                   {&OptimizerState::exp_avg_sq, "exp_avg_sq"}};

TEST(PrepareMomentStepTest, CreatesNamedBuffersAndGivesEachSlotItsNextStep) {
  Tensor p0 = Tensor::zeros(DType::kF32, {3}), g0 = Tensor::zeros(DType::kF32, {3});
  Tensor p1 = Tensor::zeros(DType::kBF16, {2, 2}), g1 = Tensor::zeros(DType::kBF16, {2, 2});
  OptimizerState s0, s1;
  s1.step = 4;
  s1.exp_avg = Tensor::zeros(DType::kBF16, {2, 2});  // loaded from a checkpoint: kept
  void* loaded = s1.exp_avg.raw();
  std::vector<ParamSlot> slots{{"p0", p0, g0, s0}, {"p1", p1, g1, s1}};
  std::vector<int64_t> steps{7, 7, 7};  // replaced, not appended to
  prepare_moment_step(slots, "test_step", kMoments, [](int64_t t) { return t; }, steps);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 5}));
  ASSERT_TRUE(s0.exp_avg.defined() && s0.exp_avg_sq.defined());
  EXPECT_EQ(s0.exp_avg.dims(), p0.dims());
  EXPECT_EQ(s1.exp_avg_sq.dtype(), DType::kBF16);
  EXPECT_EQ(s1.exp_avg.raw(), loaded);
  EXPECT_FALSE(s0.max_exp_avg_sq.defined());  // not asked for
  EXPECT_EQ(s0.step, 0);                       // counting the step is the caller's
}

TEST(PrepareMomentStepTest, BadBufferThrowsBeforeAnyBufferIsCreated) {
  Tensor p0 = Tensor::zeros(DType::kF32, {3}), g0 = Tensor::zeros(DType::kF32, {3});
  Tensor p1 = Tensor::zeros(DType::kF32, {2}), g1 = Tensor::zeros(DType::kF32, {2});
  OptimizerState s0, s1;
  s1.exp_avg_sq = Tensor::zeros(DType::kF32, {3});
  std::vector<ParamSlot> slots{{"p0", p0, g0, s0}, {"p1", p1, g1, s1}};
  try {
    std::vector<int64_t> steps;
    prepare_moment_step(slots, "test_step", kMoments, [](int64_t t) { return t; }, steps);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("test_step: state 'exp_avg_sq' of parameter 'p1'"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(s0.exp_avg.defined());
  EXPECT_FALSE(s1.exp_avg.defined());
}

// Covered elements of each tensor, in plan order.
std::vector<int64_t> covered(const MultiTensorPlan& plan, size_t tensors) {
  std::vector<int64_t> n(tensors, 0);
  for (int64_t i = 0; i < plan.num_segments(); ++i) n[static_cast<size_t>(plan.segment(i).tensor)] += plan.segment(i).end - plan.segment(i).begin;
  return n;
}

TEST(SlotPlanTest, KeptWhileTheNumelsStayAndMadeAgainWhenTheyChange) {
  Tensor p0 = Tensor::zeros(DType::kF32, {3}), g0 = Tensor::zeros(DType::kF32, {3});
  Tensor p1 = Tensor::zeros(DType::kF32, {70000}), g1 = Tensor::zeros(DType::kF32, {70000});
  Tensor p2 = Tensor::zeros(DType::kF32, {5}), g2 = Tensor::zeros(DType::kF32, {5});
  OptimizerState s0, s1, s2;
  std::vector<ParamSlot> slots{{"p0", p0, g0, s0}, {"p1", p1, g1, s1}};
  const TensorSegment* first = &slot_plan(slots, PlanOver::kParams).segment(0);
  const MultiTensorPlan& again = slot_plan(slots, PlanOver::kGrads);
  EXPECT_EQ(&again.segment(0), first) << "same numels: the plan is kept, not made again";
  EXPECT_EQ(covered(again, 2), (std::vector<int64_t>{3, 70000}));
  std::vector<ParamSlot> other{{"p0", p0, g0, s0}, {"p2", p2, g2, s2}};
  EXPECT_EQ(covered(slot_plan(other, PlanOver::kParams), 2), (std::vector<int64_t>{3, 5}));
}

}  // namespace
}  // namespace trainrt
