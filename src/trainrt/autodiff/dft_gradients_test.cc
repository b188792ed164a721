// DFT's gradient (DFTGrad, the transpose of the transform) against f64 finite differences: real
// and complex signals, forward and inverse, onesided, dft_length padding and truncating, every
// axis form (opset 17's attribute, opset 20's input, negative axes).
#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::random_f64;
using testing::WorstErrors;

Attribute on(int64_t v) { return Attribute::of_int(v); }

TEST(DftGradients, EveryFormMatchesFiniteDifferences) {
  WorstErrors worst;
  const Tensor none;
  const Tensor real = random_f64({2, 5, 3, 1}, 90), complex = random_f64({2, 5, 3, 2}, 91);
  for (const Tensor* x : {&real, &complex})
    for (int64_t inverse : {0, 1})
      for (int64_t onesided : {0, 1}) {
        SCOPED_TRACE(to_string(x->dims()) + " inverse=" + std::to_string(inverse) + " onesided=" + std::to_string(onesided));
        const std::map<std::string, Attribute> attrs{{"inverse", on(inverse)}, {"onesided", on(onesided)}};
        worst.check({.op = "DFT", .attrs = attrs, .opset = 17}, {*x});                          // axis 1
        worst.check({.op = "DFT", .attrs = attrs, .opset = 17}, {*x, Tensor::from_i64({8})});   // zero-padded
        worst.check({.op = "DFT", .attrs = attrs, .opset = 17}, {*x, Tensor::from_i64({3})});   // truncated
        worst.check({.op = "DFT", .attrs = attrs, .opset = 20}, {*x});                          // axis -2
        worst.check({.op = "DFT", .attrs = attrs, .opset = 20}, {*x, Tensor::from_i64({4}), Tensor::from_i64({0})});
      }
  worst.check({.op = "DFT", .attrs = {{"axis", on(-3)}}, .opset = 17}, {complex});
}

}  // namespace
}  // namespace trainrt
