// Test support for the fast pooling paths (max_pool_rows, average_pool_rows, average_pool_grad_rows):
// random 1-D and 2-D pool geometries on one image of 2 channels, plane values, and the bit-for-bit
// check each fast-path test runs against the general window walk.
//
//   std::mt19937 rng(7);
//   if (auto pool = random_pool(rng, "MaxPool(test)")) { const Windows w(pool->geometry); ... }
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/ops/pool_geometry.h"

namespace trainrt {

struct RandomPool {
  PoolAttributes attrs;
  std::vector<int64_t> dims;  // (1, 2, [H,] W)
  PoolGeometry geometry;
  std::string what;           // the innermost dim's size, kernel, stride, dilation, pads, ceil_mode
};

// Kernel 1-4, stride 1-3, dilation 2 one time in four, pads up to half the window + 1 on each
// side, ceil_mode one time in two; W in 1-40, H in 1-9; 2-D three times in four. nullopt when no
// window fits (the op rejects those before any kernel runs).
inline std::optional<RandomPool> random_pool(std::mt19937& rng, const char* op) {
  auto in = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int rank = in(0, 3) != 0 ? 2 : 1;
  RandomPool p;
  p.dims = {1, 2};
  std::vector<int64_t> begin, end;
  for (int d = 0; d < rank; ++d) {
    const int64_t k = in(1, 4), s = in(1, 3), dil = in(1, 4) == 4 ? 2 : 1, window = dil * (k - 1) + 1;
    p.dims.push_back(d == rank - 1 ? in(1, 40) : in(1, 9));
    p.attrs.kernel.push_back(k), p.attrs.strides.push_back(s), p.attrs.dilations.push_back(dil);
    begin.push_back(in(0, static_cast<int>(window) / 2 + 1)), end.push_back(in(0, static_cast<int>(window) / 2 + 1));
  }
  p.attrs.pads = begin;
  p.attrs.pads.insert(p.attrs.pads.end(), end.begin(), end.end());
  p.attrs.ceil_mode = in(0, 1) == 1;
  try {
    p.geometry = p.attrs.geometry(op, p.dims);
  } catch (const ShapeError&) {
    return std::nullopt;
  }
  p.what = "x " + std::to_string(p.dims.back()) + " k " + std::to_string(p.attrs.kernel.back()) + " s " +
           std::to_string(p.attrs.strides.back()) + " d " + std::to_string(p.attrs.dilations.back()) + " pads " +
           std::to_string(begin.back()) + "," + std::to_string(end.back()) + (p.attrs.ceil_mode ? " ceil" : "");
  return p;
}

// n spread values (sums whose rounding depends on the order) or, with `specials`, some NaN, +inf,
// -inf and -0 among them.
inline std::vector<float> spread_values(int64_t n, bool specials, std::mt19937& rng) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> spread(-3.f, 3.f);
  std::uniform_int_distribution<int> pick(0, 29);
  for (float& e : v) {
    const int k = specials ? pick(rng) : 29;
    e = k == 0 ? std::numeric_limits<float>::quiet_NaN() : k == 1 ? kInf : k == 2 ? -kInf : k == 3 ? -0.f : spread(rng);
  }
  return v;
}

// A fast path's plane against the general walk's, bit for bit; where the walk gives NaN, any NaN
// will do (counted in `nans`).
inline ::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& ref, int& nans) {
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      if (!std::isnan(got[i])) return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs NaN";
      ++nans;
    } else if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(ref[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << ref[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace trainrt
