// average_pool_grad_plane_rows against the general window walk (pool_kernels.cc's: dX from +0,
// each window's dY / Windows::count() added to its in-bounds taps, windows in row-major order,
// windows counting no tap skipped) on the random 1-D and 2-D geometries of pool_rows_testing.h,
// both count_include_pad settings: dX must agree bit for bit, a NaN only as "both NaN" (payloads
// of NaNs may depend on operand order).
#include "trainrt/kernels/cpu/average_pool_grad_rows.h"

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

std::vector<float> general(const Windows& w, const float* dy, bool include_pad) {
  std::vector<float> dx(static_cast<size_t>(w.in_plane()), 0.f);
  w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
    const int64_t n = w.count(r, start, include_pad);
    if (n == 0) return;
    const float g = dy[o] / static_cast<float>(n);
    w.for_each_tap(r, start, [&](int64_t t) { dx[static_cast<size_t>(t)] += g; });
  });
  return dx;
}

TEST(AveragePoolGradRows, MatchesTheGeneralPathOnRandomGeometries) {
  std::mt19937 rng(13);
  int checked = 0, nans = 0, overlapping = 0;
  for (int trial = 0; trial < 800; ++trial) {
    const std::optional<RandomPool> pool = random_pool(rng, "AveragePoolGrad(test)");
    if (!pool) continue;
    const PoolGeometry& g = pool->geometry;
    const Windows w(g);
    ASSERT_TRUE(average_pool_grad_rows_apply(w));
    const bool include_pad = trial % 2 == 1, specials = trial % 4 >= 2;
    overlapping += w.kernel[2] * w.dilation[2] > w.stride[2];  // an element takes several windows' g
    const std::string what =
        "trial " + std::to_string(trial) + " " + pool->what + (include_pad ? " include_pad" : "");
    for (int64_t p = 0; p < g.planes; ++p) {
      const std::vector<float> dy = spread_values(w.out_plane(), specials, rng);
      const std::vector<float> ref = general(w, dy.data(), include_pad);
      std::vector<float> dx(ref.size(), 42.f);
      average_pool_grad_plane_rows(w, dy.data(), dx.data(), include_pad);
      ASSERT_TRUE(same_bits(dx, ref, nans)) << what;
    }
    ++checked;
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(overlapping, 100);
  EXPECT_GT(nans, 0);
}

TEST(AveragePoolGradRows, OverlappingWindowsAddInWindowOrder) {
  // k 3, s 1 over 8 columns: element 2 takes the g of windows 0, 1, 2, here 1, 1e8 and -1e8:
  // (0 + 1 + 1e8) - 1e8 = 0 in f32 (1e8 + 1 rounds to 1e8), the other way round 1.
  PoolAttributes a;
  a.kernel = {3}, a.strides = {1};
  const Windows w(a.geometry("AveragePoolGrad(test)", {1, 1, 8}));
  const std::vector<float> dy{3.f, 3e8f, -3e8f, 1.f, 7.f, -2.f};
  std::vector<float> dx(8, 42.f);
  average_pool_grad_plane_rows(w, dy.data(), dx.data(), false);
  const std::vector<float> ref = general(w, dy.data(), false);
  for (size_t i = 0; i < dx.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(dx[i]), std::bit_cast<uint32_t>(ref[i])) << "element " << i;
  EXPECT_EQ(dx[2], 0.f);
}

TEST(AveragePoolGradRows, AppliesToOneAndTwoSpatialDimsOnly) {
  PoolAttributes a;
  a.kernel = {2, 2, 2};
  EXPECT_FALSE(average_pool_grad_rows_apply(Windows(a.geometry("AveragePoolGrad(test)", {1, 1, 4, 4, 4}))));
  a.kernel = {2, 2};
  EXPECT_TRUE(average_pool_grad_rows_apply(Windows(a.geometry("AveragePoolGrad(test)", {1, 1, 4, 4}))));
}

}  // namespace
// A kernel of many taps over a much smaller input (EfficientNet's pooler, ceil mode) takes the
// general walk, which visits only the in-bounds taps; up to 64 taps always take the rows.
TEST(AveragePoolGradRows, LeavesAKernelFarLargerThanItsInputToTheGeneralWalk) {
  PoolAttributes a;
  a.ceil_mode = true;
  a.kernel = {15, 16}, a.strides = {15, 16};
  EXPECT_FALSE(average_pool_grad_rows_apply(Windows(a.geometry("AveragePoolGrad(test)", {1, 1, 3, 2}))));
  EXPECT_TRUE(average_pool_grad_rows_apply(Windows(a.geometry("AveragePoolGrad(test)", {1, 1, 20, 20}))));
  a.kernel = {8, 8}, a.strides = {8, 8};
  EXPECT_TRUE(average_pool_grad_rows_apply(Windows(a.geometry("AveragePoolGrad(test)", {1, 1, 2, 2}))));
}

}  // namespace trainrt
