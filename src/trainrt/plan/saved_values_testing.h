// Helpers of the saved-value tests (saved_values_test, loss_gradient_in_forward_test): a joint
// graph made, chosen and partitioned, then run forward and backward, and what to compare.
//
//   TrainingStep chosen = testing::train_step(make_graph, {"w"}, {{"x", x}}, /*choose=*/true);
//   EXPECT_TRUE(testing::saves(chosen.programs, "h"));
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/core/testing.h"
#include "trainrt/plan/partition.h"
#include "trainrt/plan/saved_values.h"
#include "trainrt/runtime/session.h"

namespace trainrt::testing {

struct TrainingStep {
  TrainingPrograms programs;
  SavedValueChoices made;
  std::vector<Tensor> forward_outputs;  // the graph's outputs, then the saved values
  std::vector<Tensor> grads;            // in grad_of order (by name)
};

// Builds the joint graph of `make()`'s graph for d loss / d wrt, makes the choices when `choose`,
// partitions, and runs forward then backward on `inputs` (by forward input name), with the output
// gradients `output_grads` (by output name; none given: dLoss = 1).
inline TrainingStep train_step(const std::function<std::shared_ptr<Graph>()>& make, const std::vector<std::string>& wrt,
                        const std::map<std::string, Tensor>& inputs, bool choose,
                        std::map<std::string, Tensor> output_grads = {}) {
  if (output_grads.empty()) output_grads["loss"] = Tensor::scalar<float>(1.f);
  std::vector<std::string> with_grad;
  for (const auto& [name, grad] : output_grads) with_grad.push_back(name);
  std::shared_ptr<Graph> joint = make();
  GradientResult grads = build_gradients(*joint, {.outputs_with_grad = with_grad, .wrt = wrt});
  TrainingStep step;
  if (choose) step.made = choose_saved_values(*joint, grads);
  step.programs = partition_joint_graph(*joint, grads);
  std::map<std::string, Tensor> by_name = inputs;
  std::vector<Tensor> forward_inputs;
  for (const Value* v : step.programs.forward->inputs()) forward_inputs.push_back(by_name.at(v->name));
  step.forward_outputs = Session(step.programs.forward).run(forward_inputs);
  const auto& outputs = step.programs.forward->outputs();
  for (size_t i = 0; i < outputs.size(); ++i) by_name[outputs[i]->name] = step.forward_outputs[i];
  for (size_t i = 0; i < with_grad.size(); ++i) by_name[grads.output_grad_inputs.at(i)] = output_grads.at(with_grad[i]);
  std::vector<Tensor> backward_inputs;
  for (const std::string& name : step.programs.backward_inputs) backward_inputs.push_back(by_name.at(name));
  step.grads = Session(step.programs.backward).run(backward_inputs);
  return step;
}

inline int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

inline bool saves(const TrainingPrograms& p, const std::string& name) {
  return std::find(p.saved.begin(), p.saved.end(), name) != p.saved.end();
}

// The same loss, bit for bit, and gradients within (rtol, atol); 0, 0: the same bits.
inline void expect_same_results(const TrainingStep& chosen, const TrainingStep& plain, double rtol = 1e-6,
                                double atol = 1e-7) {
  expect_close(chosen.forward_outputs[0], plain.forward_outputs[0], 0, 0);  // the loss
  ASSERT_EQ(chosen.grads.size(), plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) expect_close(chosen.grads[i], plain.grads[i], rtol, atol);
}

}  // namespace trainrt::testing
