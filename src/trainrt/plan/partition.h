// Splits a joint graph (forward + backward, from build_gradients) into a forward program and a
// backward program that run as two separate calls (autograd's forward and backward).
//
// The forward program computes the original outputs plus the "saved" values: the forward values
// the backward reads. They are graph outputs of the forward program (fresh storage handed to the
// caller, who keeps them alive until backward) and graph inputs of the backward program (bound
// zero-copy). Everything else in both programs lives in each program's reused arena.
// Initializers are shared (same storage) by both programs.
//
//   GradientResult grads = build_gradients(joint, request);
//   TrainingPrograms p = partition_joint_graph(joint, grads);
//   // forward(p.forward->inputs) -> original outputs ++ p.saved
//   // backward(p.backward_inputs: saved / forward inputs / output grads by name) -> grads
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

struct TrainingPrograms {
  std::shared_ptr<Graph> forward;   // inputs: the joint graph's inputs minus output-grad inputs
  std::shared_ptr<Graph> backward;  // outputs: the gradients, in gradients.grad_of order (by name)
  std::vector<std::string> saved;   // forward outputs after the original ones, in order
  // Names of the backward program's inputs, in order; each is a saved value, a forward input,
  // a forward output, or an output-gradient input.
  std::vector<std::string> backward_inputs;
};

TrainingPrograms partition_joint_graph(const Graph& joint, const GradientResult& gradients);

// A new graph with copies of `nodes` (in the given order), the given inputs and outputs, and the
// initializers the nodes read (sharing their storage). Throws InternalError when a node reads a
// value that is neither an input, an initializer nor produced by an earlier node of the list.
std::shared_ptr<Graph> extract_subgraph(const Graph& source, const std::vector<const Node*>& nodes,
                                        const std::vector<const Value*>& inputs,
                                        const std::vector<const Value*>& outputs, const std::string& name);

}  // namespace trainrt
