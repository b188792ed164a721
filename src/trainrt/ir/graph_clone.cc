#include "trainrt/ir/graph_clone.h"

#include <unordered_map>

namespace trainrt {

std::unique_ptr<Graph> clone_graph(const Graph& g) {
  auto out = std::make_unique<Graph>();
  out->name = g.name;
  out->doc = g.doc;
  for (const auto& [domain, version] : g.opsets()) out->set_opset(domain, version);
  std::unordered_map<const Value*, Value*> copy;
  auto copy_type = [](const Value& from, Value& to) {
    to.dtype = from.dtype;
    to.shape = from.shape;
    to.declared = from.declared;
    to.data = from.data;
  };
  for (const Value* in : g.inputs()) {
    Value* v = out->add_input(in->name, in->dtype, in->shape);
    copy_type(*in, *v);
    copy[in] = v;
  }
  for (const Value* init : g.initializers()) {
    if (copy.count(init)) continue;  // an input with a default
    copy[init] = out->add_initializer(init->name, init->data);
  }
  const std::vector<Node*> nodes = g.nodes();
  for (const Node* n : nodes)
    for (const Value* o : n->outputs())
      if (o) copy_type(*o, *(copy[o] = out->add_value(o->name)));
  for (const Node* n : nodes) {
    std::vector<Value*> inputs, outputs;
    for (const Value* v : n->inputs()) inputs.push_back(v ? copy.at(v) : nullptr);
    for (const Value* v : n->outputs()) outputs.push_back(v ? copy.at(v) : nullptr);
    Node* c = out->add_node_with_outputs(n->op_type(), inputs, outputs, n->domain(), n->name());
    for (const auto& [key, a] : n->attrs()) c->set_attr(key, a);
  }
  for (const Value* o : g.outputs()) out->add_output(copy.at(o));
  return out;
}

}  // namespace trainrt
