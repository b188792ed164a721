// Helpers of the pass tests: an empty graph with the opsets the passes read, and op counts.
//
//   auto g = testing::graph_with_opsets();
//   EXPECT_EQ(testing::count(*g, "Add"), 0);
#pragma once

#include <memory>
#include <string>

#include "trainrt/ir/graph.h"

namespace trainrt::testing {

// ONNX opset 18 and the trainrt domain's opset 1.
inline std::shared_ptr<Graph> graph_with_opsets() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  g->set_opset(std::string(kTrainrtDomain), 1);
  return g;
}

// How many nodes of `g` run op `op`.
inline int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

}  // namespace trainrt::testing
