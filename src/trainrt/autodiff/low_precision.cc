#include "trainrt/autodiff/low_precision.h"

#include <algorithm>
#include <string>

#include "trainrt/ops/op_schema.h"

namespace trainrt {

DType low_precision_input(const Node& n) {
  for (const Value* v : n.inputs())
    if (v && is_low_precision(v->dtype)) return v->dtype;
  return DType::kUndefined;
}

namespace {

Node* add_cast(Graph& g, Value* from, Value* to, DType dtype) {
  Node* c = g.add_node_with_outputs("Cast", {from}, {to}, kOnnxDomain, g.unique_name(to->name + "/Cast"));
  c->set_attr("to", Attribute::of_int(dtype_to_onnx(dtype)));
  infer_and_store(*c);
  return c;
}

Value* widen(Graph& g, Value* v, WidenedValues& widened) {
  Value*& w = widened[v];
  if (!w) add_cast(g, v, w = g.add_value(g.unique_name(v->name + "/f32")), DType::kF32);
  return w;
}

}  // namespace

std::vector<Value*> compute_in_f32(Graph& g, Node* n, DType low, WidenedValues* widened) {
  WidenedValues local;
  WidenedValues& casts = widened ? *widened : local;
  const std::vector<Node*> before = g.nodes();
  const auto at = std::find(before.begin(), before.end(), n);
  Node* next = at != before.end() && at + 1 != before.end() ? *(at + 1) : nullptr;
  const std::string op = n->op_type(), domain = n->domain(), name = n->name();
  const auto attrs = n->attrs();
  std::vector<Value*> inputs = n->inputs();
  const std::vector<Value*> outputs = n->outputs();
  std::vector<DType> stored;
  for (const Value* o : outputs) stored.push_back(o ? o->dtype : DType::kUndefined);
  g.remove_node(n);
  for (Value*& v : inputs)
    if (v && is_low_precision(v->dtype)) v = widen(g, v, casts);
  std::vector<Value*> results;
  for (const Value* o : outputs) results.push_back(o ? g.add_value(g.unique_name(o->name + "/f32")) : nullptr);
  Node* wide = g.add_node_with_outputs(op, inputs, results, domain, name);
  for (const auto& [key, value] : attrs) wide->set_attr(key, value);
  infer_and_store(*wide);  // throws as inference does when the op does not take f32 either
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!outputs[o]) continue;
    if (results[o]->dtype == DType::kF32 && stored[o] != DType::kF32) {
      add_cast(g, results[o], outputs[o], is_low_precision(stored[o]) ? stored[o] : low);
    } else {
      Node* same = g.add_node_with_outputs("Identity", {results[o]}, {outputs[o]}, kOnnxDomain,
                                           g.unique_name(outputs[o]->name + "/Identity"));
      infer_and_store(*same);
    }
  }
  if (next) {
    const std::vector<Node*> after = g.nodes();
    for (size_t i = before.size() - 1; i < after.size(); ++i) g.move_before(after[i], next);
  }
  return outputs;
}

}  // namespace trainrt
