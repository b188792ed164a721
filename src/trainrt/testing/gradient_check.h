// Finite-difference gradient checks in f64: the proof every gradient rule must pass.
//
// For one node (or any graph), builds loss = sum_o sum(output_o * W_o) with random fixed weights
// W_o, differentiates it with the autodiff, runs the joint graph, and compares each analytic
// gradient element with the central difference (loss(x + eps) - loss(x - eps)) / (2 eps).
// Inputs should be f64 so eps can be small; integer inputs (indices, shapes) are passed through.
// Ops with f32 kernels only (Conv, on oneDNN) are checked in f32 with a large eps: exact for
// functions linear in each input element (a convolution), and f32 rounding divided by 2 eps stays
// far below a wrong gradient's error.
//
//   NodeSpec spec{.op = "Softmax", .attrs = {{"axis", Attribute::of_int(-1)}}};
//   expect_gradients_match(spec, {random_f64({3, 5}, 1)});
//
// Tests over many variants of an op collect the worst error per op in a WorstErrors:
//
//   WorstErrors worst;
//   worst.check(spec, {random_f64({3, 5}, 1)});
//   worst.record("GPT block", expect_graph_gradients_match(make_block, inputs, {1, 2}));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
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

// The same check for a whole graph: d loss / d input for the graph inputs `wrt` of the graph
// `make` builds (output 0: the loss, a scalar). `inputs` feed every graph input in order; those
// in `wrt` must be f64. Returns the largest relative error seen.
double expect_graph_gradients_match(const std::function<std::shared_ptr<Graph>()>& make, std::vector<Tensor> inputs,
                                    const std::vector<int>& wrt, double rtol = 1e-5, double atol = 1e-7);

// The worst relative error of each op's checks, printed when it goes out of scope (for reviews
// of the rules' numerics; the checks themselves fail on atol + rtol * |numeric|).
class WorstErrors {
 public:
  WorstErrors() = default;
  WorstErrors(const WorstErrors&) = delete;
  WorstErrors& operator=(const WorstErrors&) = delete;
  ~WorstErrors();

  // expect_gradients_match, traced with the op, opset and input shapes; records under spec.op.
  void check(const NodeSpec& spec, const std::vector<Tensor>& inputs, const GradCheckOptions& options = {});
  // Records an error measured elsewhere (a graph check) under `what`.
  void record(const std::string& what, double error);

 private:
  std::map<std::string, double> worst_;
};

}  // namespace trainrt::testing
