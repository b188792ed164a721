// A deep copy of a Graph: its inputs, initializers (data shared: tensors are handles), values with
// their dtypes and shapes, nodes with their attributes, outputs and opsets.
//
// Use it where one graph is worked on by several owners that may each change it: a control-flow
// op's body is shape-inferred per call with the caller's input types, and each kernel runs its own
// Session over its own copy (a Session widens bf16 ops and records inferred shapes in its graph).
// Graph attributes (nested bodies) stay shared: whoever needs to change one clones it in turn.
//
//   std::unique_ptr<Graph> copy = clone_graph(*node.attr("then_branch")->g);
//   copy->mutable_inputs()[0]->shape = Shape::of({2, 3});
//   infer_graph_shapes(*copy);
#pragma once

#include <memory>

#include "trainrt/ir/graph.h"

namespace trainrt {

std::unique_ptr<Graph> clone_graph(const Graph& g);

}  // namespace trainrt
