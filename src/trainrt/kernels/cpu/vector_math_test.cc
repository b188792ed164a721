// The vectorizable f32 math of vector_math.h against double-precision libm over sweeps of the
// float range (run through the SIMD-cloned leaf loop, so the vectorized code is what is tested),
// and the 16-bit float conversions of elementwise.h against core/dtype's scalar ones.
#include "trainrt/kernels/cpu/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "trainrt/kernels/cpu/elementwise.h"

namespace trainrt {
namespace {

// Every 1009th float bit pattern of both signs in [lo, hi] (about 400 000 over the full range).
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> xs;
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t u = 0; u < 0x7f800000u; u += 1009) {
      const float v = std::bit_cast<float>(u | sign);
      if (v >= lo && v <= hi) xs.push_back(v);
    }
  return xs;
}

// Worst relative error of f against ref over the sweep, counting results below `floor` in
// magnitude as absolute errors relative to `floor` (denormal results carry few bits).
template <typename F>
double worst_error(F f, double (*ref)(double), float lo, float hi, double floor = 1e-37) {
  const std::vector<float> xs = sweep(lo, hi);
  std::vector<float> ys(xs.size());
  unary_leaf(f, xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = static_cast<float>(ref(xs[i]));  // inf where f32 overflows
    if (std::isinf(want) && static_cast<double>(ys[i]) == want) continue;
    const double err = std::fabs(ys[i] - want) / std::max(std::fabs(want), floor);
    EXPECT_LE(err, 3e-5) << "x = " << xs[i] << ": got " << ys[i] << ", want " << want;
    worst = std::max(worst, err);
  }
  return worst;
}

TEST(VectorMath, AccurateOverTheFloatRange) {
  EXPECT_LT(worst_error([](float x) { return exp_f32(x); }, [](double x) { return std::exp(x); }, -103, 89), 2e-7);
  EXPECT_LT(worst_error([](float x) { return log_f32(x); }, [](double x) { return std::log(x); }, 0, 3e38f), 2e-7);
  EXPECT_LT(worst_error([](float x) { return expm1_f32(x); }, [](double x) { return std::expm1(x); }, -100, 88), 2e-7);
  EXPECT_LT(worst_error([](float x) { return log1p_f32(x); }, [](double x) { return std::log1p(x); }, -0.999f, 1e30f),
            2e-7);
  EXPECT_LT(worst_error([](float x) { return tanh_f32(x); }, [](double x) { return std::tanh(x); }, -20, 20), 2e-7);
  EXPECT_LT(worst_error([](float x) { return sigmoid_f32(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -80,
                        80),
            2e-7);
  EXPECT_LT(worst_error([](float x) { return erf_f32(x); }, [](double x) { return std::erf(x); }, -10, 10), 3e-7);
  // erfc and the GELUs decay like exp(-x^2) in their tails, where rounding x^2 (or the tanh
  // argument) to f32 costs up to ~x^2 ulp: about 1e-6 over the range that matters, 3e-5 beyond.
  auto gelu = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  auto gelu_tanh = [](double x) {
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1 + std::exp(-2 * u));
  };
  EXPECT_LT(worst_error([](float x) { return erfc_f32(x); }, [](double x) { return std::erfc(x); }, -10, 3), 1e-6);
  EXPECT_LT(worst_error([](float x) { return gelu_f32(x); }, gelu, -3, 100), 1.5e-6);
  EXPECT_LT(worst_error([](float x) { return gelu_tanh_f32(x); }, gelu_tanh, -3, 100), 1e-6);
  EXPECT_LT(worst_error([](float x) { return erfc_f32(x); }, [](double x) { return std::erfc(x); }, 3, 9), 5e-6);
  EXPECT_LT(worst_error([](float x) { return gelu_f32(x); }, gelu, -12, -3, 1e-30), 3e-5);
  EXPECT_LT(worst_error([](float x) { return gelu_tanh_f32(x); }, gelu_tanh, -10, -3, 1e-30), 3e-5);
  EXPECT_EQ(worst_error([](float x) { return floor_f32(x); }, [](double x) { return std::floor(x); }, -3e38f, 3e38f), 0);
  EXPECT_EQ(worst_error([](float x) { return ceil_f32(x); }, [](double x) { return std::ceil(x); }, -3e38f, 3e38f), 0);
}

TEST(VectorMath, EdgesFollowIeee) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(-inf), 0.f);
  EXPECT_EQ(exp_f32(89.f), inf);
  EXPECT_GT(exp_f32(-100.f), 0.f);  // a denormal, not flushed to zero
  EXPECT_TRUE(std::isnan(exp_f32(nan)));
  EXPECT_EQ(log_f32(0.f), -inf);
  EXPECT_EQ(log_f32(inf), inf);
  EXPECT_TRUE(std::isnan(log_f32(-1.f)));
  EXPECT_TRUE(std::isnan(log_f32(nan)));
  EXPECT_NEAR(log_f32(1e-45f), std::log(double(1e-45f)), 1e-5);  // denormal input
  EXPECT_EQ(tanh_f32(inf), 1.f);
  EXPECT_EQ(tanh_f32(-inf), -1.f);
  EXPECT_TRUE(std::isnan(tanh_f32(nan)));
  EXPECT_EQ(erf_f32(inf), 1.f);
  EXPECT_EQ(erf_f32(-inf), -1.f);
  EXPECT_TRUE(std::isnan(erf_f32(nan)));
  EXPECT_EQ(sigmoid_f32(-inf), 0.f);
  EXPECT_EQ(sigmoid_f32(inf), 1.f);
  EXPECT_EQ(gelu_f32(inf), inf);
  EXPECT_EQ(gelu_tanh_f32(inf), inf);
  EXPECT_TRUE(std::signbit(floor_f32(-0.f)));
  EXPECT_TRUE(std::signbit(ceil_f32(-0.5f)));
  EXPECT_TRUE(std::isnan(floor_f32(nan)));
}

TEST(HalfConversions, MatchCoreScalarConversions) {
  // Every half and bfloat16 bit pattern to f32.
  std::vector<Half> h(65536);
  std::vector<BFloat16> b(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i].bits = b[i].bits = static_cast<uint16_t>(i);
  std::vector<float> fh(65536), fb(65536);
  convert_to_f32(h.data(), fh.data(), 65536);
  convert_to_f32(b.data(), fb.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want_h = f16_to_f32(static_cast<uint16_t>(i));
    if (std::isnan(want_h)) EXPECT_TRUE(std::isnan(fh[i])) << i;
    else EXPECT_EQ(std::bit_cast<uint32_t>(fh[i]), std::bit_cast<uint32_t>(want_h)) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(fb[i]), std::bit_cast<uint32_t>(bf16_to_f32(static_cast<uint16_t>(i)))) << i;
  }
  // A sweep of f32 bit patterns (denormals, halfway cases, overflow, inf, NaN) back to 16 bits.
  std::vector<float> xs;
  for (uint64_t u = 0; u < 0x100000000ull; u += 4099) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (float v : {65504.f, 65519.f, 65520.f, 6.1035156e-05f, 2.9802322e-08f, 1.0009766f, 1.0014648f}) {
    xs.push_back(v);
    xs.push_back(-v);
  }
  std::vector<Half> out_h(xs.size());
  std::vector<BFloat16> out_b(xs.size());
  convert_from_f32(xs.data(), out_h.data(), static_cast<int64_t>(xs.size()));
  convert_from_f32(xs.data(), out_b.data(), static_cast<int64_t>(xs.size()));
  int mismatches = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t want_h = f32_to_f16(xs[i]);
    const bool both_nan = std::isnan(xs[i]) && std::isnan(f16_to_f32(out_h[i].bits));
    if (out_h[i].bits != want_h && !both_nan && mismatches++ < 5) ADD_FAILURE() << "f16 of " << xs[i];
    if (out_b[i].bits != f32_to_bf16(xs[i]) && mismatches++ < 5) ADD_FAILURE() << "bf16 of " << xs[i];
  }
}

}  // namespace
}  // namespace trainrt
