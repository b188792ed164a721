#include "trainrt/passes/pass.h"

#include <algorithm>

#include "trainrt/core/logging.h"
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

bool PassPipeline::run(Graph& graph, std::vector<PassOutcome>* report) const {
  bool modified = false;
  std::string logged;
  for (const auto& pass : passes_) {
    const auto before = static_cast<int64_t>(graph.nodes().size());
    PassOutcome outcome{std::string(pass->name()), pass->apply(graph), 0};
    outcome.nodes_removed = before - static_cast<int64_t>(graph.nodes().size());
    logged += "\n  " + outcome.pass + ": " +
              (!outcome.changed ? "no change" : std::to_string(outcome.nodes_removed) + " nodes removed");
    modified = outcome.changed || modified;
    if (report) report->push_back(std::move(outcome));
  }
  TRAINRT_LOG(kInfo) << "passes on graph '" << graph.name << "':" << logged;
  return modified;
}

}  // namespace trainrt
