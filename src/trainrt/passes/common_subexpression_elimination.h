// CommonSubexpressionElimination: a node that computes what an earlier node already computes (same
// op, domain, inputs and attributes) is dropped, and its readers read the earlier node's outputs.
// Captures repeat work often: the same Cast of one value before each of its readers under autocast,
// one Shape or Transpose per use, a mask built once per layer from the same ids.
//
//   before:  a = Cast(x, to=bf16)   b = Cast(x, to=bf16)   y = MatMul(a, w1)   z = MatMul(b, w2)
//   after:   a = Cast(x, to=bf16)                          y = MatMul(a, w1)   z = MatMul(a, w2)
//
// Walks the nodes in topological order keyed by (domain, op, input values, attributes), so chains
// of duplicates fold in one pass (b's readers become duplicates of a's once b is gone). Never
// merged: ops with random outputs or state (OpSchema::deterministic false: Dropout, PythonOp),
// ops without a schema, nodes with a graph attribute (If, Loop, Scan), and a
// duplicate with an output that is a graph output (its name is the caller's). Run before autodiff:
// the gradient graph then has one node's gradient, not two that add up.
#pragma once

#include "trainrt/passes/pass.h"

namespace trainrt {

class CommonSubexpressionElimination final : public Pass {
 public:
  std::string_view name() const override { return "CommonSubexpressionElimination"; }

 protected:
  bool apply_impl(Graph& graph) const override;
};

}  // namespace trainrt
