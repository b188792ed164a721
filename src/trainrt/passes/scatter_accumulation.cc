#include "trainrt/passes/scatter_accumulation.h"

#include <algorithm>

#include "trainrt/passes/graph_edit.h"
#include "trainrt/passes/label_sparsity.h"

namespace trainrt {
namespace {

// A GatherGrad with no addend, read only by `sum`, of the sum's dtype and static dims, whose
// indices are not a row selection.
bool accumulable_scatter(const Graph& g, const Value* v, const Node& sum) {
  const Node* p = v ? v->producer : nullptr;
  if (!p || p->domain() != kTrainrtDomain || p->op_type() != "GatherGrad" || p->input(3) != nullptr) return false;
  if (v->uses.size() != 1 || v->uses[0].node != &sum || is_graph_output(g, v)) return false;
  const Value* out = sum.output(0);
  if (v->dtype != out->dtype || !v->shape.is_static() || !out->shape.is_static() || v->shape != out->shape) return false;
  return !is_valid_rows(p->input(1));
}

// The Sum's operand that can take the others as its addend: the last, or either of two.
int scatter_operand(const Graph& g, const Node& sum) {
  const int n = sum.num_inputs();
  if (n < 2) return -1;
  if (accumulable_scatter(g, sum.input(n - 1), sum)) return n - 1;
  if (n == 2 && accumulable_scatter(g, sum.input(0), sum)) return 0;
  return -1;
}

}  // namespace

bool ScatterAccumulation::apply_impl(Graph& graph) const {
  bool changed = false;
  for (Node* sum : graph.topological_order()) {
    if (sum->domain() != kOnnxDomain || (sum->op_type() != "Sum" && sum->op_type() != "Add")) continue;
    const int at = scatter_operand(graph, *sum);
    if (at < 0) continue;
    Node* scatter = sum->input(at)->producer;
    std::vector<Value*> others;
    for (int i = 0; i < sum->num_inputs(); ++i)
      if (i != at) others.push_back(sum->input(i));
    // Each other operand must already have the result's shape: a broadcast Add is not a sum of
    // same-sized contributions.
    const Value* scattered = scatter->output(0);
    if (!std::all_of(others.begin(), others.end(),
                     [&](const Value* v) { return v->dtype == scattered->dtype && v->shape == scattered->shape; }))
      continue;
    // The rewrite runs where the Sum ran: nodes added now would otherwise run last.
    const std::vector<Node*> order = graph.nodes();
    auto next = std::find(order.begin(), order.end(), sum) + 1;
    if (next != order.end() && *next == scatter) ++next;  // it goes too
    const Node* anchor = next != order.end() ? *next : nullptr;
    Value* out = sum->output(0);
    Value* addend = others.size() == 1 ? others[0] : add_op(graph, "Sum", others, out->name + "/others");
    std::vector<Value*> inputs = scatter->inputs();
    inputs.resize(4);
    inputs[3] = addend;
    Node* accumulated = add_like(graph, *scatter, inputs, "/accumulated");
    graph.remove_node(sum);
    become(graph, accumulated->output(0), out);
    remove_unread(graph, {scatter});
    const size_t added = others.size() == 1 ? 1 : 2;  // the others' Sum, and the accumulating scatter
    place_before(graph, static_cast<size_t>(graph.num_nodes()) - added, anchor);
    changed = true;
  }
  return changed;
}

}  // namespace trainrt
