// Test harness for the optimizer reference tests (tests only): a set of parameters of many
// shapes, reproducible gradients per step, and a relative-error comparison against double
// references that track the magnitude of what they compute.
//
//   OptimProblem problem(kReferenceShapes, /*seed=*/1);
//   problem.fill_grads(step);                     // the gradients of step `step`
//   std::vector<Tracked> p;
//   load_tracked(p, problem.params[0], problem.params[0].numel());
//   adam_step(problem.slots(), options);
//   ...                                            // the reference step on p, in double
//   expect_close_to(problem.params[0], p, 1e-6, "param");
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/optim/optimizer_state.h"

namespace trainrt::testing {

// Scalar, empty, odd sizes, one aligned and odd-aligned 2-d shape, and ~1M elements.
inline const std::vector<std::vector<int64_t>> kReferenceShapes = {
    {}, {0}, {1}, {7}, {3, 5}, {2, 0, 3}, {17, 33}, {64, 16}, {33, 65, 7}, {1024, 1025}};

// Whether a reference test checks `param` after `step`: every step for the small shapes; steps
// 1-3 and every 25th for the ~1M-element one, which keeps the suite at a few seconds.
inline bool checked_at(int step, const Tensor& param) {
  return param.numel() < 100'000 || step <= 3 || step % 25 == 0;
}

// A reproducible value in [-1, 1) for (seed, step, index): splitmix64 of the three.
inline float hashed_uniform(uint64_t seed, uint64_t step, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + step * 0xbf58476d1ce4e5b9ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// Parameters (values in [-1, 1)), their gradients and optimizer states, stored as `dtype` (f32,
// f16 or bf16; the values are rounded to it). The gradients of a step have a magnitude that changes
// from step to step (1e-4 .. 3), so moments of very different sizes and the eps term are
// exercised; about 1 in 16 entries is exactly zero.
struct OptimProblem {
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<Tensor> grads;
  std::vector<OptimizerState> states;
  uint64_t seed;

  OptimProblem(const std::vector<std::vector<int64_t>>& shapes, uint64_t problem_seed, DType dtype = DType::kF32)
      : seed(problem_seed) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      names.push_back(std::string("p").append(std::to_string(i)));
      params.push_back(Tensor::empty(dtype, shapes[i]));
      grads.push_back(Tensor::empty(dtype, shapes[i]));
      for (int64_t j = 0; j < params.back().numel(); ++j)
        store(params.back(), j, hashed_uniform(seed, 0, i * 10'000'000 + j));
    }
    states.resize(shapes.size());
  }

  void fill_grads(int step) {
    const double magnitude = std::pow(10.0, -4.0 + 4.5 * (0.5 + 0.5 * hashed_uniform(seed, step, 0)));
    for (size_t i = 0; i < grads.size(); ++i) {
      for (int64_t j = 0; j < grads[i].numel(); ++j) {
        const uint64_t index = i * 10'000'000 + j;
        const float u = hashed_uniform(seed + 1, step, index);
        store(grads[i], j, (index * 2654435761u + step) % 16 == 0 ? 0.f : static_cast<float>(u * magnitude));
      }
    }
  }

  // t[j] = value, rounded to nearest even for 16-bit t.
  static void store(Tensor& t, int64_t j, float value) {
    if (t.dtype() == DType::kF16)
      t.data<Half>()[j].bits = f32_to_f16(value);
    else if (t.dtype() == DType::kBF16)
      t.data<BFloat16>()[j].bits = f32_to_bf16(value);
    else
      t.data<float>()[j] = value;
  }

  std::vector<ParamSlot> slots() {
    std::vector<ParamSlot> out;
    for (size_t i = 0; i < params.size(); ++i) out.push_back({names[i], params[i], grads[i], states[i]});
    return out;
  }
};

// A double together with its magnitude: the same expression evaluated on the absolute values of
// its terms (running error analysis). An f32 evaluation is within a few ulps of the magnitude, so
// the references measure errors relative to it: a parameter that lands near zero because p and
// lr * g nearly cancel is not held to a precision its inputs never had, and a result without
// cancellation is held to the plain relative error.
struct Tracked {
  double value = 0;
  double magnitude = 0;
  Tracked() = default;
  Tracked(double v) : value(v), magnitude(std::abs(v)) {}  // NOLINT: constants and inputs
  Tracked(double v, double m) : value(v), magnitude(m) {}
};
inline Tracked operator+(Tracked a, Tracked b) { return {a.value + b.value, a.magnitude + b.magnitude}; }
inline Tracked operator-(Tracked a, Tracked b) { return {a.value - b.value, a.magnitude + b.magnitude}; }
inline Tracked operator-(Tracked a) { return {-a.value, a.magnitude}; }
inline Tracked operator*(Tracked a, Tracked b) { return {a.value * b.value, a.magnitude * b.magnitude}; }
// Divisors in the optimizers are positive sums (sqrt(v) + eps), accurate to a few ulps.
inline Tracked operator/(Tracked a, Tracked b) { return {a.value / b.value, a.magnitude / std::abs(b.value)}; }
inline Tracked sqrt(Tracked a) { return {std::sqrt(a.value), std::sqrt(a.magnitude)}; }
inline Tracked max(Tracked a, Tracked b) { return a.value >= b.value ? a : b; }

// Sets out to a tensor's values as Tracked (exact inputs: magnitude |x|), or to `numel` zeros when
// the tensor is undefined. Reuses out's storage: the references run 100 steps on 1M elements.
inline void load_tracked(std::vector<Tracked>& out, const Tensor& t, int64_t numel) {
  out.resize(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i)
    out[static_cast<size_t>(i)] = t.defined() ? Tracked(t.to_double(i)) : Tracked(0.0);
}

// Half the spacing of the values of `dtype` around x (0 for f32, whose rounding the rtol of a
// comparison covers): the error that rounding an f32 result to 16-bit storage adds.
inline double half_ulp(DType dtype, double x) {
  if (dtype != DType::kF16 && dtype != DType::kBF16) return 0;
  const int mantissa_bits = dtype == DType::kF16 ? 10 : 7;
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;  // below: subnormals, fixed spacing
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits - 1);
}

// Expects |actual - expected.value| <= rtol * expected.magnitude + half_ulp(actual) elementwise
// (a result within rtol before it was rounded to 16-bit storage) and returns the largest relative
// error seen, the rounding excluded. Magnitudes below the smallest normal f32 count as that value:
// f32 subnormals carry fewer significant bits.
inline double expect_close_to(const Tensor& actual, const std::vector<Tracked>& expected, double rtol,
                              const std::string& what) {
  EXPECT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  double worst = 0;
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double a = actual.to_double(static_cast<int64_t>(i));
    const double scale = std::max<double>(expected[i].magnitude, std::numeric_limits<float>::min());
    const double err = std::max(0.0, std::abs(a - expected[i].value) - half_ulp(actual.dtype(), a)) / scale;
    worst = std::max(worst, err);
    if (!(err <= rtol) && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << a << ", expected " << expected[i].value
                    << " (relative error " << err << ")";
  }
  return worst;
}

// Expects |actual - expected| <= rtol * |expected| elementwise.
inline void expect_close_to(const Tensor& actual, const std::vector<double>& expected, double rtol,
                            const std::string& what) {
  std::vector<Tracked> values(expected.begin(), expected.end());
  expect_close_to(actual, values, rtol, what);
}

// A tensor's values as doubles.
inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.to_double(i);
  return out;
}

}  // namespace trainrt::testing
