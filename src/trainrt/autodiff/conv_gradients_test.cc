// Conv's gradient rule against finite differences. Conv runs on oneDNN in f32 only, so the check
// runs in f32 with eps 0.25: the loss is linear in every single element of X, W and B, so the
// central difference has no truncation error, only f32 rounding (about 1e-5 here).
#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::GradCheckOptions;
using testing::random_tensor;
using testing::WorstErrors;

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

const GradCheckOptions kF32{.eps = 0.25, .rtol = 1e-3, .atol = 2e-4};

TEST(ConvGradients, MatchFiniteDifferences) {
  WorstErrors worst;
  uint32_t seed = 1;
  auto check = [&](std::vector<int64_t> x, std::vector<int64_t> w, std::map<std::string, Attribute> attrs,
                   bool bias, GradCheckOptions options = kF32) {
    std::vector<Tensor> in{random_tensor(x, seed++), random_tensor(w, seed++)};
    if (bias) in.push_back(random_tensor({w[0]}, seed++));
    worst.check({.op = "Conv", .attrs = std::move(attrs)}, in, options);
  };
  check({2, 3, 6, 5}, {4, 3, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}, true);
  check({2, 4, 7, 6}, {6, 2, 3, 2}, {{"group", Attribute::of_int(2)}, {"strides", ints({2, 1})}, {"pads", ints({0, 1, 1, 0})}},
        true);
  check({1, 3, 6, 6}, {3, 1, 3, 3}, {{"group", Attribute::of_int(3)}, {"dilations", ints({2, 2})}}, false);
  check({3, 2, 9}, {3, 2, 3}, {{"auto_pad", Attribute::of_string("SAME_LOWER")}, {"strides", ints({2})}}, true);
  check({2, 2, 4, 5, 3}, {2, 2, 2, 3, 2}, {{"pads", ints({1, 0, 1, 0, 1, 1})}}, true);
  // Only W and B (X is the model input): ConvGrad is asked for dW and dB alone.
  GradCheckOptions weights_only = kF32;
  weights_only.wrt = {1, 2};
  check({5, 3, 5, 5}, {2, 3, 3, 3}, {{"auto_pad", Attribute::of_string("SAME_UPPER")}}, true, weights_only);
  // Only B (a frozen weight): dW goes to scratch, dB comes out of backward-weights.
  GradCheckOptions bias_only = kF32;
  bias_only.wrt = {2};
  check({2, 3, 5, 5}, {2, 3, 3, 3}, {}, true, bias_only);
}

}  // namespace
}  // namespace trainrt
