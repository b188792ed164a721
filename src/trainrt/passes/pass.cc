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

std::string describe(const std::vector<PassOutcome>& report) {
  std::string out;
  for (const PassOutcome& o : report) {
    if (!out.empty()) out += ", ";
    out += o.pass + " " + (o.changed ? std::to_string(o.nodes_removed) + " nodes removed" : "no change");
  }
  return out.empty() ? "off" : out;
}

bool PassPipeline::run(Graph& graph, std::vector<PassOutcome>* report) const {
  std::vector<PassOutcome> outcomes;
  for (const auto& pass : passes_) {
    const int before = graph.num_nodes();
    const bool changed = pass->apply(graph);
    outcomes.push_back({std::string(pass->name()), changed, before - graph.num_nodes()});
  }
  TRAINRT_LOG(kInfo) << "passes on graph '" << graph.name << "': " << describe(outcomes);
  const bool modified = std::any_of(outcomes.begin(), outcomes.end(), [](const PassOutcome& o) { return o.changed; });
  if (report) *report = std::move(outcomes);
  return modified;
}

}  // namespace trainrt
