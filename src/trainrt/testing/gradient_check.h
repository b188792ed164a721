// Finite-difference gradient checks in f64: the proof every gradient rule must pass.
//
// For one node (or any graph), builds loss = sum_o sum(output_o * W_o) with random fixed weights
// W_o, differentiates it with the autodiff, runs the joint graph, and compares each analytic
// gradient element with the central difference (loss(x + eps) - loss(x - eps)) / (2 eps).
// Inputs should be f64 so eps can be small; integer inputs (indices, shapes) are passed through.
//
//   NodeSpec spec{.op = "Softmax", .attrs = {{"axis", Attribute::of_int(-1)}}};
//   expect_gradients_match(spec, {random_f64({3, 5}, 1)});
#pragma once

#include <cstdint>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt::testing {

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-7;
  uint32_t seed = 7;
  // Indices of the inputs to differentiate; empty means every floating-point input.
  std::vector<int> wrt;
};

// Uniform random f64 tensor in [lo, hi).
Tensor random_f64(std::vector<int64_t> dims, uint32_t seed, double lo = -1.0, double hi = 1.0);

// Adds a GoogleTest failure per mismatching element (at most a few per input), naming the op,
// the input and the element index. Returns the largest relative error seen.
double expect_gradients_match(const NodeSpec& spec, const std::vector<Tensor>& inputs,
                              const GradCheckOptions& options = {});

}  // namespace trainrt::testing
