#include "trainrt/plan/partition.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/core/error.h"

namespace trainrt {

std::shared_ptr<Graph> extract_subgraph(const Graph& source, const std::vector<const Node*>& nodes,
                                        const std::vector<const Value*>& inputs,
                                        const std::vector<const Value*>& outputs, const std::string& name) {
  auto g = std::make_shared<Graph>();
  g->name = name;
  for (const auto& [domain, version] : source.opsets()) g->set_opset(domain, version);
  std::unordered_map<const Value*, Value*> copy;
  for (const Value* v : inputs) copy[v] = g->add_input(v->name, v->dtype, v->shape);
  auto lookup = [&](const Value* v, const Node* reader) -> Value* {
    if (!v) return nullptr;
    if (auto it = copy.find(v); it != copy.end()) return it->second;
    if (v->is_initializer()) return copy[v] = g->add_initializer(v->name, v->data);
    throw InternalError(fmt("extracting '", name, "': ", reader ? reader->describe() : std::string("output"),
                            " reads '", v->name, "', which is not available in this program"));
  };
  for (const Node* n : nodes) {
    std::vector<Value*> in;
    for (const Value* v : n->inputs()) in.push_back(lookup(v, n));
    std::vector<std::string> out_names;
    for (const Value* v : n->outputs()) out_names.push_back(v ? v->name : std::string());
    Node* c = g->add_node(n->op_type(), in, out_names, n->domain(), n->name());
    for (const auto& [k, a] : n->attrs()) c->set_attr(k, a);
    for (int o = 0; o < n->num_outputs(); ++o) {
      const Value* v = n->output(o);
      if (!v) continue;
      c->output(o)->dtype = v->dtype;
      c->output(o)->shape = v->shape;
      c->output(o)->declared = v->declared;
      copy[v] = c->output(o);
    }
  }
  for (const Value* v : outputs) g->add_output(lookup(v, nullptr));
  return g;
}

namespace {

// The forward nodes some forward output depends on, in order. A forward node whose values nothing
// reads is left out: the forward copy of a node the saved-values choice recomputes in the backward
// (a gradient's Cast rule 7 made in the forward, recomputed beside its reader). A PythonOp stays
// whatever reads it: the user's Function may act beyond its outputs.
std::vector<const Node*> needed_forward_nodes(const std::vector<const Node*>& nodes,
                                              const std::vector<const Value*>& outputs) {
  std::unordered_set<const Value*> needed(outputs.begin(), outputs.end());
  std::vector<const Node*> kept;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node* n = *it;
    const bool read = n->op_type() == "PythonOp" ||
                      std::any_of(n->outputs().begin(), n->outputs().end(), [&](const Value* v) { return v && needed.count(v); });
    if (!read) continue;
    kept.push_back(n);
    for (const Value* v : n->inputs())
      if (v) needed.insert(v);
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

}  // namespace

TrainingPrograms partition_joint_graph(const Graph& joint, const GradientResult& gradients) {
  std::unordered_set<const Node*> is_forward(gradients.forward_nodes.begin(), gradients.forward_nodes.end());
  std::vector<const Node*> backward_nodes;
  for (const Node* n : joint.topological_order())
    if (!is_forward.count(n)) backward_nodes.push_back(n);

  std::unordered_set<std::string> grad_inputs(gradients.output_grad_inputs.begin(),
                                              gradients.output_grad_inputs.end());
  std::vector<const Value*> forward_inputs;
  for (const Value* v : joint.inputs())
    if (!grad_inputs.count(v->name)) forward_inputs.push_back(v);
  std::vector<const Value*> forward_outputs;
  for (const std::string& name : gradients.forward_outputs) forward_outputs.push_back(joint.find_value(name));

  // What the backward reads from outside itself, in first-use order.
  std::unordered_set<const Value*> produced_in_backward;
  for (const Node* n : backward_nodes)
    for (const Value* v : n->outputs())
      if (v) produced_in_backward.insert(v);
  std::vector<const Value*> backward_inputs;
  std::unordered_set<const Value*> seen;
  auto need = [&](const Value* v) {
    if (!v || v->is_initializer() || produced_in_backward.count(v) || !seen.insert(v).second) return;
    backward_inputs.push_back(v);
  };
  for (const Node* n : backward_nodes)
    for (const Value* v : n->inputs()) need(v);
  for (const auto& [wrt, grad] : gradients.grad_of) need(joint.find_value(grad));

  TrainingPrograms p;
  std::vector<const Value*> forward_all_outputs = forward_outputs;
  for (const Value* v : backward_inputs) {
    bool from_forward_nodes = v->producer && is_forward.count(v->producer);
    bool already_output = std::find(forward_outputs.begin(), forward_outputs.end(), v) != forward_outputs.end();
    if (from_forward_nodes && !already_output) {
      forward_all_outputs.push_back(v);
      p.saved.push_back(v->name);
    }
    p.backward_inputs.push_back(v->name);
  }
  std::vector<const Value*> grads;
  for (const auto& [wrt, grad] : gradients.grad_of) grads.push_back(joint.find_value(grad));

  p.forward = extract_subgraph(joint, needed_forward_nodes(gradients.forward_nodes, forward_all_outputs),
                               forward_inputs, forward_all_outputs, joint.name + "_forward");
  p.backward = extract_subgraph(joint, backward_nodes, backward_inputs, grads, joint.name + "_backward");
  return p;
}

}  // namespace trainrt
