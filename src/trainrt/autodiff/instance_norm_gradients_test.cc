// InstanceNormalization's gradient (InstanceNormalizationGrad) against f64 finite differences, for
// X, scale and B, over 1-D, 2-D and 3-D planes and a plane of one element.
#include <gtest/gtest.h>

#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::random_f64;

TEST(InstanceNormGradients, MatchFiniteDifferences) {
  testing::WorstErrors worst;
  const NodeSpec spec{.op = "InstanceNormalization", .attrs = {{"epsilon", Attribute::of_float(1e-3f)}}};
  worst.check(spec, {random_f64({2, 3, 5}, 60), random_f64({3}, 61), random_f64({3}, 62)});
  worst.check(spec, {random_f64({2, 2, 3, 4}, 63), random_f64({2}, 64), random_f64({2}, 65)});
  worst.check(spec, {random_f64({1, 2, 2, 2, 3}, 66), random_f64({2}, 67), random_f64({2}, 68)});
  // Planes of one element: y = B, dX = 0 (its finite difference is rounding: no relative error).
  testing::expect_gradients_match(spec, {random_f64({3, 2, 1}, 69), random_f64({2}, 70), random_f64({2}, 71)});
}

}  // namespace
}  // namespace trainrt
