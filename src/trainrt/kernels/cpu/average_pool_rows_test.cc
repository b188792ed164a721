// average_pool_plane_rows against the general window walk (pool_kernels.cc's: taps summed in
// row-major order from 0, divided by Windows::count()) on random 1-D and 2-D geometries, both
// count_include_pad settings: outputs must agree bit for bit, a NaN only as "both NaN" (payloads
// of NaNs may depend on operand order).
#include "trainrt/kernels/cpu/average_pool_rows.h"

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

std::vector<float> general(const Windows& w, const float* x, bool include_pad) {
  std::vector<float> y;
  w.for_each_window([&](int64_t, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
    float sum = 0;
    w.for_each_tap(r, start, [&](int64_t t) { sum += x[t]; });
    const int64_t n = w.count(r, start, include_pad);
    y.push_back(n == 0 ? 0.f : sum / static_cast<float>(n));
  });
  return y;
}

TEST(AveragePoolRows, MatchesTheGeneralPathOnRandomGeometries) {
  std::mt19937 rng(11);
  int checked = 0, nans = 0;
  for (int trial = 0; trial < 800; ++trial) {
    const std::optional<RandomPool> pool = random_pool(rng, "AveragePool(test)");
    if (!pool) continue;
    const PoolGeometry& g = pool->geometry;
    const Windows w(g);
    ASSERT_TRUE(average_pool_rows_apply(w));
    const bool include_pad = trial % 2 == 1, specials = trial % 4 >= 2;
    const std::string what =
        "trial " + std::to_string(trial) + " " + pool->what + (include_pad ? " include_pad" : "");
    for (int64_t p = 0; p < g.planes; ++p) {
      const std::vector<float> x = spread_values(w.in_plane(), specials, rng);
      const std::vector<float> ref = general(w, x.data(), include_pad);
      std::vector<float> y(ref.size(), 42.f);
      average_pool_plane_rows(w, x.data(), y.data(), include_pad);
      ASSERT_TRUE(same_bits(y, ref, nans)) << what;
    }
    ++checked;
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(nans, 0);  // NaN, and inf - inf, propagate
}

TEST(AveragePoolRows, NanAndInfPropagate) {
  // One row of 20 windows of 2 (k 2, s 2): window i averages (x[2 i], x[2 i + 1]).
  PoolAttributes a;
  a.kernel = {2}, a.strides = {2};
  const Windows w(a.geometry("AveragePool(test)", {1, 1, 40}));
  std::vector<float> x(40, 1.f);
  x[2] = kNan;                    // NaN
  x[4] = kInf;                    // +inf
  x[6] = kInf, x[7] = -kInf;      // NaN
  x[8] = -kInf, x[9] = -kInf;     // -inf
  x[10] = -0.f, x[11] = -0.f;     // +0: the sum starts at +0, as the general walk's
  std::vector<float> y(20);
  average_pool_plane_rows(w, x.data(), y.data(), false);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], kInf);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(y[4], -kInf);
  EXPECT_FALSE(std::signbit(y[5]));
}

TEST(AveragePoolRows, AppliesToOneAndTwoSpatialDimsOnly) {
  PoolAttributes a;
  a.kernel = {2, 2, 2};
  EXPECT_FALSE(average_pool_rows_apply(Windows(a.geometry("AveragePool(test)", {1, 1, 4, 4, 4}))));
  a.kernel = {2, 2};
  EXPECT_TRUE(average_pool_rows_apply(Windows(a.geometry("AveragePool(test)", {1, 1, 4, 4}))));
}

}  // namespace
// A kernel of many taps over a much smaller input (EfficientNet's pooler, ceil mode) takes the
// general walk, which visits only the in-bounds taps; up to 64 taps always take the rows.
TEST(AveragePoolRows, LeavesAKernelFarLargerThanItsInputToTheGeneralWalk) {
  PoolAttributes a;
  a.ceil_mode = true;
  a.kernel = {15, 16}, a.strides = {15, 16};
  EXPECT_FALSE(average_pool_rows_apply(Windows(a.geometry("AveragePool(test)", {1, 1, 3, 2}))));
  EXPECT_TRUE(average_pool_rows_apply(Windows(a.geometry("AveragePool(test)", {1, 1, 20, 20}))));
  a.kernel = {8, 8}, a.strides = {8, 8};
  EXPECT_TRUE(average_pool_rows_apply(Windows(a.geometry("AveragePool(test)", {1, 1, 2, 2}))));
}

}  // namespace trainrt
