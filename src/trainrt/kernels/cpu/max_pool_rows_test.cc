// max_pool_plane_rows against the general window walk (argmax in pool_windows.h) on random 1-D and
// 2-D geometries: values and argmax must agree bit for bit, ties, NaN and -inf included.
#include "trainrt/kernels/cpu/max_pool_rows.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "trainrt/kernels/cpu/pool_rows_testing.h"

namespace trainrt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// What fills a plane: spread values, ties (three distinct values), NaN and -inf among ties, or
// all -inf (every window a tie of -inf, padding never wins).
enum class Fill { kRandom, kTies, kNanAndInf, kAllMinusInf };

std::vector<float> plane_values(int64_t n, Fill fill, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> spread(-3.f, 3.f);
  std::uniform_int_distribution<int> pick(0, 9);
  for (float& e : v) {
    const int k = pick(rng);
    switch (fill) {
      case Fill::kRandom: e = spread(rng); break;
      case Fill::kTies: e = static_cast<float>(k % 3); break;
      case Fill::kNanAndInf: e = k == 0 ? kNan : k == 1 ? -kInf : k == 2 ? kInf : static_cast<float>(k % 2); break;
      case Fill::kAllMinusInf: e = -kInf; break;
    }
  }
  return v;
}

struct General {
  std::vector<float> y;
  std::vector<int32_t> argmax;
};
General general(const Windows& w, const float* x) {
  General g;
  w.for_each_window([&](int64_t, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
    const int64_t best = argmax(w, x, r, start);
    g.y.push_back(best < 0 ? std::numeric_limits<float>::lowest() : x[best]);
    g.argmax.push_back(static_cast<int32_t>(best));
  });
  return g;
}

TEST(MaxPoolRows, MatchesTheGeneralPathOnRandomGeometries) {
  std::mt19937 rng(7);
  int checked = 0, edge_windows = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const std::optional<RandomPool> pool = random_pool(rng, "MaxPool(test)");
    if (!pool) continue;
    const PoolGeometry& g = pool->geometry;
    const Windows w(g);
    ASSERT_TRUE(max_pool_rows_apply(w));
    const Fill fill = static_cast<Fill>(trial % 4);
    const std::string what = "trial " + std::to_string(trial) + " " + pool->what + " fill " + std::to_string(trial % 4);
    for (int64_t p = 0; p < g.planes; ++p) {
      const std::vector<float> x = plane_values(w.in_plane(), fill, rng);
      const General ref = general(w, x.data());
      std::vector<float> y(ref.y.size(), 42.f), y_only(ref.y.size(), 42.f);
      std::vector<int32_t> at(ref.y.size(), 42);
      max_pool_plane_rows(w, x.data(), y.data(), at.data());
      max_pool_plane_rows(w, x.data(), y_only.data(), nullptr);
      for (size_t o = 0; o < ref.y.size(); ++o) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y[o]), std::bit_cast<uint32_t>(ref.y[o])) << what << " output " << o;
        ASSERT_EQ(std::bit_cast<uint32_t>(y_only[o]), std::bit_cast<uint32_t>(ref.y[o])) << what << " output " << o;
        ASSERT_EQ(at[o], ref.argmax[o]) << what << " output " << o;
        edge_windows += ref.argmax[o] < 0;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 400);
  EXPECT_GT(edge_windows, 0);  // some windows lie wholly in padding
}

TEST(MaxPoolRows, TiesAndNanKeepTheFirstTap) {
  // One row of 20 windows of 2 (k 2, s 2): window i holds (a_i, b_i).
  PoolAttributes a;
  a.kernel = {2}, a.strides = {2};
  const Windows w(a.geometry("MaxPool(test)", {1, 1, 40}));
  std::vector<float> x(40, 1.f);                  // ties: the first tap
  x[2] = kNan, x[3] = 5.f;                        // NaN first: NaN
  x[4] = 5.f, x[5] = kNan;                        // NaN second: NaN
  x[6] = kNan, x[7] = kNan;                       // two NaNs: the first
  x[8] = -kInf, x[9] = -kInf;                     // -inf tie: the first
  x[10] = -kInf, x[11] = kInf;                    // +inf
  std::vector<float> y(20);
  std::vector<int32_t> at(20);
  max_pool_plane_rows(w, x.data(), y.data(), at.data());
  EXPECT_EQ(at[0], 0);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(at[1], 2);
  EXPECT_EQ(at[2], 5);
  EXPECT_EQ(at[3], 6);
  EXPECT_EQ(at[4], 8);
  EXPECT_EQ(y[4], -kInf);
  EXPECT_EQ(at[5], 11);
}

TEST(MaxPoolRows, AppliesToOneAndTwoSpatialDimsOnly) {
  PoolAttributes a;
  a.kernel = {2, 2, 2};
  EXPECT_FALSE(max_pool_rows_apply(Windows(a.geometry("MaxPool(test)", {1, 1, 4, 4, 4}))));
  a.kernel = {2, 2};
  EXPECT_TRUE(max_pool_rows_apply(Windows(a.geometry("MaxPool(test)", {1, 1, 4, 4}))));
}

}  // namespace
// A kernel of many taps over a much smaller input (EfficientNet's pooler, ceil mode) takes the
// general walk, which visits only the in-bounds taps; up to 64 taps always take the rows.
TEST(MaxPoolRows, LeavesAKernelFarLargerThanItsInputToTheGeneralWalk) {
  PoolAttributes a;
  a.ceil_mode = true;
  a.kernel = {15, 16}, a.strides = {15, 16};
  EXPECT_FALSE(max_pool_rows_apply(Windows(a.geometry("MaxPool(test)", {1, 1, 3, 2}))));
  EXPECT_TRUE(max_pool_rows_apply(Windows(a.geometry("MaxPool(test)", {1, 1, 20, 20}))));
  a.kernel = {8, 8}, a.strides = {8, 8};
  EXPECT_TRUE(max_pool_rows_apply(Windows(a.geometry("MaxPool(test)", {1, 1, 2, 2}))));
}

}  // namespace trainrt
