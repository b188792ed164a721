// The IR verifier: checks the structural invariants every stage of TrainRT relies on.
//
// Run it after import and, in debug builds, after every pass. It checks that
//   - every node input is defined: a graph input, an initializer or a node output of this graph;
//   - every value has at most one producer, and a graph input or initializer has none;
//   - producer and use links agree in both directions;
//   - graph outputs exist and are defined;
//   - values and nodes have non-empty, unique names;
//   - there is no cycle.
// It does not check types or shapes (that is shape inference, ops layer).
//
//   verify(graph);                       // throws InvalidModel listing what is wrong
//   std::vector<std::string> problems = verify_problems(graph);  // empty when valid
#pragma once

#include <string>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

// Each problem is one line naming the node (name and op) or value involved. At most
// kMaxVerifierProblems are listed (and a count of the rest), so a badly broken graph still gives
// a readable message.
inline constexpr size_t kMaxVerifierProblems = 20;
std::vector<std::string> verify_problems(const Graph& g);

// Throws InvalidModel with every problem found, one per line.
void verify(const Graph& g);

}  // namespace trainrt
