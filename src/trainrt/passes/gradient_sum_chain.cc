#include "trainrt/passes/gradient_sum_chain.h"

#include <algorithm>

#include "trainrt/autodiff/gradient_builder.h"

namespace trainrt {
namespace {

// Whether every operand of Sum `n` has its result's dtype and dims.
bool sums_same_sized(const Node& n) {
  if (is_gradient_sum(n)) return true;
  const Value* out = n.output(0);
  if (!out || !out->shape.is_static()) return false;
  return std::all_of(n.inputs().begin(), n.inputs().end(),
                     [&](const Value* v) { return v && v->dtype == out->dtype && v->shape == out->shape; });
}

// Moves `n` to just after the later-placed producer of its operands (insertion order, which the
// schedule keeps).
void place_after_operands(Graph& g, Node* n) {
  const std::vector<Node*> order = g.nodes();
  size_t last = 0;
  bool any = false;
  for (const Value* v : n->inputs()) {
    if (!v || !v->producer) continue;
    const size_t at = static_cast<size_t>(std::find(order.begin(), order.end(), v->producer) - order.begin());
    last = any ? std::max(last, at) : at;
    any = true;
  }
  const size_t anchor = any ? last + 1 : 0;
  if (anchor < order.size() && order[anchor] != n) g.move_before(n, order[anchor]);
}

}  // namespace

bool GradientSumChain::apply_impl(Graph& graph) const {
  std::vector<Node*> sums;
  for (Node* n : graph.nodes())
    if (n->domain() == kOnnxDomain && n->op_type() == "Sum" && n->num_inputs() > 2 && sums_same_sized(*n))
      sums.push_back(n);
  for (Node* sum : sums) {
    const std::vector<Value*> parts = sum->inputs();
    Value* out = sum->output(0);
    graph.remove_node(sum);
    Value* running = parts[0];
    for (size_t k = 1; k < parts.size(); ++k) {
      Node* add = k + 1 < parts.size()
                      ? graph.add_node("Sum", {running, parts[k]}, {graph.unique_name(out->name + "/partial")})
                      : graph.add_node_with_outputs("Sum", {running, parts[k]}, {out});
      add->output(0)->dtype = out->dtype;
      add->output(0)->shape = out->shape;
      place_after_operands(graph, add);
      running = add->output(0);
    }
  }
  return !sums.empty();
}

}  // namespace trainrt
