#include "trainrt/train/low_precision_graph.h"

#include <vector>

#include "trainrt/passes/low_precision_compute.h"
#include "trainrt/plan/partition.h"

namespace trainrt {

std::shared_ptr<Graph> low_precision_graph(const std::shared_ptr<Graph>& graph) {
  std::vector<const Node*> nodes;
  for (const Node* n : graph->topological_order()) nodes.push_back(n);
  const std::vector<const Value*> inputs(graph->inputs().begin(), graph->inputs().end());
  const std::vector<const Value*> outputs(graph->outputs().begin(), graph->outputs().end());
  std::shared_ptr<Graph> copy = extract_subgraph(*graph, nodes, inputs, outputs, graph->name);
  return LowPrecisionCompute().apply(*copy) ? copy : graph;
}

}  // namespace trainrt
