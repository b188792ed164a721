#include "trainrt/passes/elementwise_fusion.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace trainrt {
namespace {

bool is_onnx(const Node& n, std::initializer_list<const char*> ops) {
  if (n.domain() != kOnnxDomain) return false;
  return std::any_of(ops.begin(), ops.end(), [&](const char* op) { return n.op_type() == op; });
}
bool is_ours(const Node& n, std::initializer_list<const char*> ops) {
  if (n.domain() != kTrainrtDomain) return false;
  return std::any_of(ops.begin(), ops.end(), [&](const char* op) { return n.op_type() == op; });
}

// f32, or bf16 computed in f32 and rounded once per op (what the generated code writes).
bool is_float(const Value* v) { return v && (v->dtype == DType::kF32 || v->dtype == DType::kBF16); }
bool is_bool(const Value* v) { return v && v->dtype == DType::kBool; }
// The same float dtype for the node's output and every input but the skipped ones (ONNX requires
// it; a mixed node is left alone).
bool one_dtype(const Node& n, int skip_inputs_before = 0, int skip_input = -1) {
  const DType t = n.output(0)->dtype;
  for (int i = skip_inputs_before; i < n.num_inputs(); ++i)
    if (i != skip_input && n.input(i) && n.input(i)->dtype != t) return false;
  return true;
}

// A scalar initializer that moves into the body as a constant.
bool is_scalar_constant(const Value* v) {
  return v && v->is_initializer() && v->data.numel() == 1 && v->producer == nullptr;
}

// Whether the two dims may be equal when the graph runs: static and equal, or dynamic on either
// side, except against a static 1 (a dim broadcast along, which the group's dims never are).
bool may_equal(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return a.value == b.value;
  const Dim& fixed = a.is_static() ? a : b;
  return !fixed.is_static() || fixed.value != 1;
}
bool may_equal(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known || a.rank() != b.rank()) return false;
  for (int64_t i = 0; i < a.rank(); ++i)
    if (!may_equal(a.dims[static_cast<size_t>(i)], b.dims[static_cast<size_t>(i)])) return false;
  return true;
}

// A group of fusible nodes, in the order they were added (a topological order of the group).
struct Group {
  std::vector<Node*> nodes;
  Shape dims;
};

class Grouping {
 public:
  void add(Node* n) {
    for (Value* in : n->inputs()) {
      if (!in || !in->producer) continue;
      auto it = group_of_.find(in->producer);
      if (it == group_of_.end() || !may_equal(groups_[it->second].dims, n->output(0)->shape)) continue;
      if (creates_cycle(*n, it->second)) continue;
      join(n, it->second);
      return;
    }
    groups_.push_back({{n}, n->output(0)->shape});
    group_of_[n] = groups_.size() - 1;
  }

  std::vector<Group> groups_with_several_nodes() const {
    std::vector<Group> out;
    for (const Group& g : groups_)
      if (g.nodes.size() > 1) out.push_back(g);
    return out;
  }

 private:
  void join(Node* n, size_t g) {
    groups_[g].nodes.push_back(n);
    group_of_[n] = g;
  }

  // Whether an input of `n` from outside group g depends on g (each group counted as one node, since
  // it will run as one): then n joining g would make the fused node feed itself.
  bool creates_cycle(const Node& n, size_t g) const {
    std::vector<const Node*> stack;
    std::set<const Node*> seen;
    std::set<size_t> groups_seen;
    auto push_inputs = [&](const Node& node) {
      for (const Value* in : node.inputs())
        if (in && in->producer && seen.insert(in->producer).second) stack.push_back(in->producer);
    };
    for (const Value* in : n.inputs()) {
      if (!in || !in->producer) continue;
      auto it = group_of_.find(in->producer);
      if (it != group_of_.end() && it->second == g) continue;
      if (seen.insert(in->producer).second) stack.push_back(in->producer);
    }
    while (!stack.empty()) {
      const Node* x = stack.back();
      stack.pop_back();
      auto it = group_of_.find(x);
      if (it == group_of_.end()) {
        push_inputs(*x);
        continue;
      }
      if (it->second == g) return true;
      if (!groups_seen.insert(it->second).second) continue;
      for (const Node* member : groups_[it->second].nodes) push_inputs(*member);
    }
    return false;
  }

  std::vector<Group> groups_;
  std::map<const Node*, size_t> group_of_;
};

// The body of a group: its external inputs become body inputs (in first-read order), scalar
// constants become body initializers, and the values read outside it become body outputs.
struct Body {
  std::shared_ptr<Graph> graph;
  std::vector<Value*> inputs;   // of the outer graph, one per body input
  std::vector<Value*> outputs;  // of the outer graph, one per body output
};

Body make_body(const Graph& graph, const Group& group) {
  Body b;
  b.graph = std::make_shared<Graph>();
  for (const auto& [domain, version] : graph.opsets()) b.graph->set_opset(domain, version);
  const std::set<const Node*> members(group.nodes.begin(), group.nodes.end());
  std::map<const Value*, Value*> inner;  // outer value -> body value
  for (const Node* n : group.nodes) {
    std::vector<Value*> ins;
    for (Value* in : n->inputs()) {
      if (!in) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = inner.find(in);
      if (it == inner.end()) {
        Value* v;
        if (is_scalar_constant(in)) {
          v = b.graph->add_initializer(in->name, in->data.clone());
        } else {
          v = b.graph->add_input("x" + std::to_string(b.inputs.size()), in->dtype, in->shape);
          b.inputs.push_back(in);
        }
        it = inner.emplace(in, v).first;
      }
      ins.push_back(it->second);
    }
    std::vector<std::string> names;
    for (const Value* out : n->outputs()) names.push_back(out->name);
    Node* copy = b.graph->add_node(n->op_type(), ins, names, n->domain(), n->name());
    for (const auto& [key, value] : n->attrs()) copy->set_attr(key, value);
    for (int o = 0; o < n->num_outputs(); ++o) {
      copy->output(o)->dtype = n->output(o)->dtype;
      copy->output(o)->shape = n->output(o)->shape;
      inner[n->output(o)] = copy->output(o);
    }
  }
  for (const Node* n : group.nodes)
    for (Value* out : n->outputs()) {
      bool outside = is_graph_output(graph, out);
      for (const Use& u : out->uses) outside = outside || !members.count(u.node);
      if (!outside) continue;
      b.graph->add_output(inner.at(out));
      b.outputs.push_back(out);
    }
  return b;
}

// Replaces the group's nodes by one FusedElementwise node computing b.outputs from b.inputs.
void fuse(Graph& graph, const Group& group, const Body& b) {
  Node* last = group.nodes.back();
  const std::string name = last->name() + "/fused";
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it) graph.remove_node(*it);
  Node* fused = graph.add_node_with_outputs("FusedElementwise", b.inputs, b.outputs, kTrainrtDomain, name);
  Attribute body;
  body.kind = Attribute::Kind::kGraph;
  body.g = b.graph;
  fused->set_attr("body", std::move(body));
}

}  // namespace

bool ElementwiseFusion::fusible(const Node& n) {
  if (n.num_outputs() != 1 || !n.output(0) || !n.output(0)->shape.rank_known || n.has_attr("broadcast")) return false;
  const Value* y = n.output(0);
  auto inputs_are = [&](auto pred) {
    for (const Value* in : n.inputs())
      if (!in || !pred(in)) return false;
    return n.num_inputs() > 0;
  };
  if (is_onnx(n, {"Add", "Sub", "Mul", "Div", "Max", "Min"}))
    return n.num_inputs() == 2 && is_float(y) && inputs_are(is_float) && one_dtype(n);
  if (is_onnx(n, {"Sum"}))
    return n.num_inputs() >= 1 && n.num_inputs() <= 8 && is_float(y) && inputs_are(is_float) && one_dtype(n);
  if (is_onnx(n, {"Neg", "Abs", "Relu", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Erf", "LeakyRelu"}))
    return n.num_inputs() == 1 && is_float(y) && is_float(n.input(0)) && one_dtype(n);
  if (is_onnx(n, {"Gelu"})) {
    const std::string a = n.attr_string("approximate", "none");
    return (a == "none" || a == "tanh") && is_float(y) && is_float(n.input(0)) && one_dtype(n);
  }
  if (is_onnx(n, {"Cast"})) return n.num_inputs() == 1 && is_float(y) && is_float(n.input(0));  // f32 <-> bf16
  if (is_onnx(n, {"Pow"}))
    return n.num_inputs() == 2 && is_float(y) && is_float(n.input(0)) && one_dtype(n, 0, 1) &&
           is_scalar_constant(n.input(1)) &&
           (n.input(1)->dtype == DType::kF32 || n.input(1)->dtype == DType::kF64 || n.input(1)->dtype == DType::kI64 ||
            n.input(1)->dtype == DType::kI32);
  if (is_onnx(n, {"Where"}))
    return n.num_inputs() == 3 && is_bool(n.input(0)) && is_float(n.input(1)) && is_float(n.input(2)) && is_float(y) &&
           one_dtype(n, 1);
  if (is_onnx(n, {"Not"})) return n.num_inputs() == 1 && is_bool(n.input(0)) && is_bool(y);
  if (is_ours(n, {"ReluGrad", "SigmoidGrad", "TanhGrad", "LeakyReluGrad"}))
    return n.num_inputs() == 2 && is_float(y) && inputs_are(is_float) && one_dtype(n);
  if (is_ours(n, {"GeluGrad"})) {
    const std::string a = n.attr_string("approximate", "none");
    return (a == "none" || a == "tanh") && n.num_inputs() == 2 && is_float(y) && inputs_are(is_float) && one_dtype(n);
  }
  return false;
}

bool ElementwiseFusion::apply_impl(Graph& graph) const {
  Grouping grouping;
  const auto left = [&](const Node& n) {
    return std::any_of(n.inputs().begin(), n.inputs().end(),
                       [&](const Value* in) { return in && leave_readers_of_.count(in->name); });
  };
  for (Node* n : graph.topological_order())
    if (fusible(*n) && !left(*n)) grouping.add(n);
  const std::vector<Group> groups = grouping.groups_with_several_nodes();
  if (groups.empty()) return false;
  std::vector<Body> bodies;
  std::vector<const Graph*> graphs;
  for (const Group& g : groups) {
    bodies.push_back(make_body(graph, g));
    graphs.push_back(bodies.back().graph.get());
  }
  const std::vector<bool> accepted = accept_(graphs);
  bool changed = false;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i >= accepted.size() || !accepted[i] || bodies[i].outputs.empty()) continue;  // empty: nothing reads it
    fuse(graph, groups[i], bodies[i]);
    changed = true;
  }
  return changed;
}

}  // namespace trainrt
