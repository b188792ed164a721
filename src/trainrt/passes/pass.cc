#include "trainrt/passes/pass.h"

#include <algorithm>

#include "trainrt/ir/verifier.h"

namespace trainrt {

bool Pass::apply(Graph& graph) const {
  const bool modified = apply_impl(graph);
#ifndef NDEBUG
  if (modified) verify(graph);
#endif
  return modified;
}

bool is_graph_output(const Graph& graph, const Value* v) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
}

bool is_read(const Graph& graph, const Node& n) {
  return std::any_of(n.outputs().begin(), n.outputs().end(),
                     [&](const Value* v) { return v && (!v->uses.empty() || is_graph_output(graph, v)); });
}

bool PassPipeline::run(Graph& graph) const {
  bool modified = false;
  for (const auto& pass : passes_) modified = pass->apply(graph) || modified;
  return modified;
}

}  // namespace trainrt
