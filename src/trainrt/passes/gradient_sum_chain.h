// GradientSumChain: a gradient summed from more than two contributions is summed as they come.
//
// The gradient builder adds up a value's contributions with one Sum once every one exists, so all of
// them are alive until the last is made: a weight shared by ALBERT's 12 layers holds 12 weight-sized
// gradients at the end of the backward; a hidden state read by separate q, k and v projections holds
// three. Eager autograd adds each contribution to the running sum as it arrives. Here such a Sum
// becomes a chain of two-operand Sums in the same order, each placed just after its later operand is
// made, so the running sum and one contribution are alive at a time. The result is the same bit for
// bit: the Sum kernel adds its operands left to right, as the chain does.
//
//   g = Sum(a, b, c)    ->    g/partial = Sum(a, b)  (just after b is made)
//                             g         = Sum(g/partial, c)  (just after c is made)
//
// Only Sums of same-sized operands are rewritten (the builder's accumulation Sums, autodiff/
// gradient_builder.h is_gradient_sum, or operands with the result's static dims): a broadcast Sum is
// left as it is.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class GradientSumChain : public Pass {
 public:
  std::string_view name() const override { return "GradientSumChain"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
