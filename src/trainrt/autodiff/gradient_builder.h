// Builds the backward of a graph: appends gradient nodes, producing the joint graph (fwd + bwd).
//
// Starts from a scalar loss (seeded with 1) or from gradients of chosen outputs fed as new graph
// inputs named "<output>_grad", and reaches the requested values (trainable initializers and
// inputs that require grad). Fan-out accumulates with Sum; nodes off every path from a requested
// value to the loss are pruned (no rule is looked up for them); integer and bool values stop
// gradients; a node on the path whose op has no rule throws UnsupportedOp naming the op and node.
// Each requested value's gradient becomes a graph output named "<value>_grad".
//
//   GradientRequest req{.loss = "loss", .wrt = {"w1", "b1", "w2", "b2"}};
//   GradientResult r = build_gradients(graph, req);      // graph is now the joint graph
//   r.grad_of.at("w1") == "w1_grad"
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

struct GradientRequest {
  std::string loss;                             // a scalar (or any float) value to differentiate
  std::vector<std::string> outputs_with_grad;   // alternatively: outputs whose grads are fed in
  std::vector<std::string> wrt;                 // values to differentiate with respect to
};

struct GradientResult {
  std::map<std::string, std::string> grad_of;   // requested value -> its gradient output
  std::vector<std::string> output_grad_inputs;  // graph inputs added for outputs_with_grad
  std::vector<const Node*> forward_nodes;       // the nodes that existed before (for partitioning)
  std::vector<std::string> forward_outputs;     // the graph outputs before gradients were added
  std::vector<std::string> unreached;           // requested values the loss does not depend on in torch's
                                                // sense (zero grads; eager's None): no float path but through
                                                // StopGradient. One reached only through floor, round, ...
                                                // gets zeros too but is not listed (eager gives zeros).
};

GradientResult build_gradients(Graph& graph, const GradientRequest& request);

// Whether `n` is a Sum the builder made to add up the gradient contributions of one value: its
// operands all have that value's dtype and shape, whatever shape inference could tell of them.
bool is_gradient_sum(const Node& n);

}  // namespace trainrt
