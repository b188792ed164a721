#include "trainrt/optim/multi_tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>

namespace trainrt {
namespace {

// Every element of every tensor lies in exactly one segment; tasks hold at most task_elements;
// cuts inside a tensor fall on 16-element boundaries; empty tensors produce no segment.
void check_plan(const std::vector<int64_t>& numels, int64_t task_elements) {
  const MultiTensorPlan plan(numels, task_elements);
  std::vector<std::vector<int>> seen(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) seen[i].assign(static_cast<size_t>(numels[i]), 0);
  for (int64_t t = 0; t < plan.num_tasks(); ++t) {
    int64_t in_task = 0;
    ASSERT_FALSE(plan.task(t).empty());
    for (const TensorSegment& s : plan.task(t)) {
      ASSERT_LT(s.begin, s.end);
      const int64_t n = numels[static_cast<size_t>(s.tensor)];
      ASSERT_LE(s.end, n);
      EXPECT_EQ(s.begin % 16, 0);
      EXPECT_TRUE(s.end == n || s.end % 16 == 0);
      for (int64_t e = s.begin; e < s.end; ++e) ++seen[static_cast<size_t>(s.tensor)][static_cast<size_t>(e)];
      in_task += s.end - s.begin;
    }
    EXPECT_LE(in_task, task_elements);
  }
  for (size_t i = 0; i < numels.size(); ++i)
    for (int c : seen[i]) ASSERT_EQ(c, 1) << "tensor " << i;
}

TEST(MultiTensorPlanTest, CoversEveryElementOnce) {
  check_plan({}, 64);
  check_plan({0, 0}, 64);
  check_plan({1, 0, 7, 64, 65, 1000, 3, 129}, 64);
  check_plan({100000}, 1000);
  std::mt19937 rng(3);
  std::vector<int64_t> numels;
  for (int i = 0; i < 300; ++i) numels.push_back(rng() % 3 == 0 ? rng() % 5000 : rng() % 40);
  check_plan(numels, 256);
  check_plan(numels, 100);
}

TEST(MultiTensorPlanTest, PacksSmallTensorsAndBalancesLargeOnes) {
  // 1000 biases of 10 elements fit in one task of 64K; one 1M tensor splits into 16 full tasks.
  EXPECT_EQ(MultiTensorPlan(std::vector<int64_t>(1000, 10)).num_tasks(), 1);
  EXPECT_EQ(MultiTensorPlan(std::vector<int64_t>{1 << 20}).num_tasks(), 16);
}

TEST(MultiTensorPlanTest, RunVisitsEverySegment) {
  std::vector<int64_t> numels{5, 300000, 17, 0, 70000};
  std::atomic<int64_t> total{0};
  MultiTensorPlan(numels).run([&](int64_t, const TensorSegment& s) { total += s.end - s.begin; });
  EXPECT_EQ(total.load(), 5 + 300000 + 17 + 70000);
}

}  // namespace
}  // namespace trainrt
