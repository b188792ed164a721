#include "trainrt/passes/graph_edit.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass.h"

namespace trainrt {

Value* add_op(Graph& g, const std::string& op, std::vector<Value*> inputs, const std::string& base,
              std::string_view domain, std::vector<std::pair<std::string, Attribute>> attrs) {
  Node* n = g.add_node(op, inputs, {g.unique_name(base)}, domain);
  for (auto& [key, value] : attrs) n->set_attr(key, value);
  infer_and_store(*n);
  return n->output(0);
}

Node* add_like(Graph& g, const Node& like, std::vector<Value*> inputs, std::string_view suffix,
               std::vector<std::pair<std::string, Attribute>> overrides) {
  std::vector<std::string> outputs;
  for (int o = 0; o < like.num_outputs(); ++o) {
    const Value* v = like.output(o);
    const bool wanted = v && (o == 0 || !v->uses.empty() || is_graph_output(g, v));
    outputs.push_back(wanted ? g.unique_name(v->name + std::string(suffix)) : std::string());
  }
  while (outputs.size() > 1 && outputs.back().empty()) outputs.pop_back();
  Node* n = g.add_node(like.op_type(), inputs, outputs, like.domain());
  for (const auto& [key, value] : like.attrs()) n->set_attr(key, value);
  for (auto& [key, value] : overrides) n->set_attr(key, value);
  infer_and_store(*n);
  return n;
}

Value* i64_constant(Graph& g, const std::string& base, std::vector<int64_t> v) {
  return g.add_initializer(g.unique_name(base), Tensor::from_i64(v));
}

void remove_unread(Graph& g, std::vector<Node*> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (bool again = true; again;) {
    again = false;
    for (Node*& n : nodes) {
      if (!n || is_read(g, *n)) continue;
      g.remove_node(n);
      n = nullptr;
      again = true;
    }
  }
}

void become(Graph& g, Value* v, Value* out) {
  Node* p = v->producer;
  if (!p || !v->uses.empty() || is_graph_output(g, v)) {
    g.add_node_with_outputs("Identity", {v}, {out});
    return;
  }
  std::vector<Value*> outputs = p->outputs();
  outputs[static_cast<size_t>(v->producer_output)] = out;
  const std::vector<Value*> inputs = p->inputs();
  const std::map<std::string, Attribute> attrs = p->attrs();
  const std::string op = p->op_type(), domain = p->domain();
  out->dtype = v->dtype;
  out->shape = v->shape;
  g.remove_node(p);
  Node* n = g.add_node_with_outputs(op, inputs, outputs, domain);
  for (const auto& [key, value] : attrs) n->set_attr(key, value);
}

void place_before(Graph& g, size_t first, const Node* anchor) {
  if (!anchor) return;
  const std::vector<Node*> order = g.nodes();
  for (size_t i = first; i < order.size(); ++i) g.move_before(order[i], anchor);
}

int sink_to_first_reader(Graph& g) {
  int moved = 0;
  const std::vector<Node*> order = g.nodes();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  for (Node* n : order) {
    if (n->num_outputs() == 0 || std::any_of(n->inputs().begin(), n->inputs().end(),
                                             [](const Value* v) { return v && v->producer; }))
      continue;
    const Node* first = nullptr;
    bool handed_over = false;  // a graph output stays where it is
    for (const Value* out : n->outputs()) {
      if (!out) continue;
      handed_over = handed_over || is_graph_output(g, out);
      for (const Use& u : out->uses)
        if (!first || position.at(u.node) < position.at(first)) first = u.node;
    }
    if (handed_over || !first || position.at(first) <= position.at(n) + 1) continue;
    g.move_before(n, first);
    ++moved;
  }
  return moved;
}

}  // namespace trainrt
