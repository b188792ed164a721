#include "trainrt/passes/weight_gradients_early.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace trainrt {
namespace {

bool is_product(const Node& n) {
  const std::string& op = n.op_type();
  return op == "Gemm" || op == "MatMul" || op == "FusedMatMul";
}

bool makes_only_graph_outputs(const Graph& g, const Node& n) {
  return n.num_outputs() > 0 && std::all_of(n.outputs().begin(), n.outputs().end(),
                                            [&](const Value* v) { return !v || is_graph_output(g, v); });
}

// The product and every node that only feeds it, transitively (a recompute read by nothing else).
std::unordered_set<const Node*> unit_of(const Graph& g, const Node& product) {
  std::unordered_set<const Node*> unit = {&product};
  bool grew = true;
  while (grew) {
    grew = false;
    for (const Node* member : std::vector<const Node*>(unit.begin(), unit.end()))
      for (const Value* in : member->inputs()) {
        const Node* p = in ? in->producer : nullptr;
        if (!p || unit.count(p) || p->op_type() == "PythonOp") continue;
        const bool feeds_only_unit = std::all_of(p->outputs().begin(), p->outputs().end(), [&](const Value* v) {
          return !v || (!is_graph_output(g, v) && std::all_of(v->uses.begin(), v->uses.end(),
                                                              [&](const Use& u) { return unit.count(u.node) > 0; }));
        });
        if (feeds_only_unit) {
          unit.insert(p);
          grew = true;
        }
      }
  }
  return unit;
}

}  // namespace

bool WeightGradientsEarly::apply_impl(Graph& graph) const {
  const std::vector<Node*> order = graph.nodes();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  // Units by their product's position; each member in one unit (a feeder of two is in neither).
  std::vector<std::vector<Node*>> units;
  std::unordered_map<const Node*, size_t> member_of;
  for (Node* n : order) {
    if (!is_product(*n) || !makes_only_graph_outputs(graph, *n)) continue;
    std::unordered_set<const Node*> unit = unit_of(graph, *n);
    if (std::any_of(unit.begin(), unit.end(), [&](const Node* m) { return member_of.count(m) > 0; })) continue;
    std::vector<Node*> members;
    for (Node* m : order)
      if (unit.count(m)) members.push_back(m);
    for (const Node* m : members) member_of[m] = units.size();
    units.push_back(std::move(members));
  }
  if (units.empty()) return false;
  // The new order: the other nodes as they were; after each, every unit whose operands from
  // outside it are all made, in its members' order.
  std::unordered_set<const Node*> emitted;
  std::vector<bool> unit_done(units.size());
  std::vector<Node*> next;
  const auto ready = [&](size_t u) {
    for (const Node* m : units[u])
      for (const Value* in : m->inputs())
        if (in && in->producer && !emitted.count(in->producer) &&
            !(member_of.count(in->producer) && member_of.at(in->producer) == u))
          return false;
    return true;
  };
  const auto emit_ready_units = [&] {
    for (bool again = true; again;) {
      again = false;
      for (size_t u = 0; u < units.size(); ++u) {
        if (unit_done[u] || !ready(u)) continue;
        for (Node* m : units[u]) {
          next.push_back(m);
          emitted.insert(m);
        }
        unit_done[u] = true;
        again = true;
      }
    }
  };
  emit_ready_units();
  for (Node* n : order) {
    if (member_of.count(n)) continue;
    next.push_back(n);
    emitted.insert(n);
    emit_ready_units();
  }
  TRAINRT_CHECK(next.size() == order.size(), "WeightGradientsEarly lost nodes of graph '", graph.name, "'");
  bool changed = false;
  for (size_t i = 0; i < next.size(); ++i) {
    const std::vector<Node*> now = graph.nodes();
    if (now[i] == next[i]) continue;
    graph.move_before(next[i], now[i]);
    changed = true;
  }
  return changed;
}

}  // namespace trainrt
