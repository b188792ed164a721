#include "trainrt/train/row_selection_prologue.h"

#include <map>
#include <set>

#include "trainrt/passes/graph_edit.h"
#include "trainrt/passes/pass.h"
#include "trainrt/plan/partition.h"

namespace trainrt {
namespace {

// Whether v is computed from graph inputs and constants alone; collects the nodes on the way.
bool from_inputs(const Value* v, std::map<const Value*, bool>& memo, std::set<const Node*>& nodes) {
  if (!v || !v->producer) return true;
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  memo[v] = false;  // a cycle cannot be lifted (and cannot happen in a valid graph)
  bool ok = true;
  for (const Value* in : v->producer->inputs()) ok = ok && from_inputs(in, memo, nodes);
  if (ok) nodes.insert(v->producer);
  return memo[v] = ok;
}

}  // namespace

RowSelectionPrologue hoist_row_selections(Graph& joint) {
  std::vector<Node*> selections;
  std::set<const Node*> lifted;
  std::map<const Value*, bool> memo;
  for (Node* n : joint.topological_order())
    if (n->domain() == kTrainrtDomain && n->op_type() == "ValidRows" && from_inputs(n->output(0), memo, lifted))
      selections.push_back(n);
  RowSelectionPrologue prologue;
  if (selections.empty()) return prologue;
  std::vector<const Node*> nodes;
  std::set<const Value*> read;
  for (const Node* n : joint.topological_order())
    if (lifted.count(n)) {
      nodes.push_back(n);
      for (const Value* v : n->inputs()) read.insert(v);
    }
  std::vector<const Value*> inputs, outputs;
  for (size_t i = 0; i < joint.inputs().size(); ++i)
    if (read.count(joint.inputs()[i])) {
      inputs.push_back(joint.inputs()[i]);
      prologue.inputs.push_back(i);
    }
  for (const Node* n : selections) outputs.push_back(n->output(0));
  prologue.graph = extract_subgraph(joint, nodes, inputs, outputs, joint.name + "_row_selection");
  prologue.num_selections = selections.size();
  Graph& p = *prologue.graph;
  for (size_t i = 0; i < selections.size(); ++i) {
    Value* from = p.find_value(selections[i]->input(0)->name);
    p.add_output(add_op(p, "Size", {from}, from->name + "/count"));
  }
  for (Node* n : selections) {
    Value* rows = n->output(0);
    joint.remove_node(n);
    joint.mutable_inputs().push_back(rows);
  }
  std::vector<Node*> left;  // what only the selections read goes with them
  for (Node* n : joint.nodes())
    if (lifted.count(n)) left.push_back(n);
  remove_unread(joint, left);
  return prologue;
}

}  // namespace trainrt
