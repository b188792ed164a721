#include "trainrt/ir/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/core/error.h"

namespace trainrt {

// ---- Node ----

void Node::replace_input(int i, Value* v) {
  Value* old = inputs_[i];
  if (old) {
    auto& uses = old->uses;
    uses.erase(std::find_if(uses.begin(), uses.end(),
                            [&](const Use& u) { return u.node == this && u.input_index == i; }));
  }
  inputs_[i] = v;
  if (v) v->uses.push_back({this, i});
}

const Attribute* Node::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

static const Attribute* typed_attr(const Node& n, const std::string& name, Attribute::Kind kind) {
  const Attribute* a = n.attr(name);
  if (a && a->kind != kind)
    throw InvalidModel(fmt(n.describe(), ": attribute '", name, "' is ", attribute_kind_name(a->kind),
                           ", expected ", attribute_kind_name(kind)));
  return a;
}

int64_t Node::attr_int(const std::string& name, int64_t fallback) const {
  const Attribute* a = typed_attr(*this, name, Attribute::Kind::kInt);
  return a ? a->i : fallback;
}
float Node::attr_float(const std::string& name, float fallback) const {
  const Attribute* a = attr(name);
  if (a && a->kind == Attribute::Kind::kInt) return static_cast<float>(a->i);
  a = typed_attr(*this, name, Attribute::Kind::kFloat);
  return a ? a->f : fallback;
}
std::string Node::attr_string(const std::string& name, const std::string& fallback) const {
  const Attribute* a = typed_attr(*this, name, Attribute::Kind::kString);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& name,
                                     const std::vector<int64_t>& fallback) const {
  const Attribute* a = typed_attr(*this, name, Attribute::Kind::kInts);
  return a ? a->ints : fallback;
}
std::vector<float> Node::attr_floats(const std::string& name,
                                     const std::vector<float>& fallback) const {
  const Attribute* a = typed_attr(*this, name, Attribute::Kind::kFloats);
  return a ? a->floats : fallback;
}
const Tensor* Node::attr_tensor(const std::string& name) const {
  const Attribute* a = typed_attr(*this, name, Attribute::Kind::kTensor);
  return a ? &a->t : nullptr;
}

std::string Node::describe() const {
  std::string op = domain_.empty() ? op_type_ : domain_ + "::" + op_type_;
  return "node '" + name_ + "' (" + op + ")";
}

int Node::opset() const { return graph_->opset(domain_); }

// ---- Graph ----

Value* Graph::add_value(const std::string& name) {
  if (by_name_.count(name)) throw InvalidModel(fmt("value name '", name, "' is defined twice"));
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->name = name;
  by_name_[name] = v;
  return v;
}

Value* Graph::add_input(const std::string& name, DType dtype, Shape shape) {
  Value* v = add_value(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_initializer(const std::string& name, Tensor data) {
  Value* v = add_value(name);
  v->dtype = data.dtype();
  v->shape = Shape::of(data.dims());
  v->data = std::move(data);
  return v;
}

Node* Graph::add_node(const std::string& op_type, const std::vector<Value*>& inputs,
                      const std::vector<std::string>& output_names, std::string_view domain,
                      std::string node_name) {
  std::vector<Value*> outputs;
  outputs.reserve(output_names.size());
  for (const auto& n : output_names) outputs.push_back(n.empty() ? nullptr : add_value(n));
  return add_node_with_outputs(op_type, inputs, outputs, domain, std::move(node_name));
}

Node* Graph::add_node_with_outputs(const std::string& op_type, const std::vector<Value*>& inputs,
                                   const std::vector<Value*>& outputs, std::string_view domain,
                                   std::string node_name) {
  nodes_.push_back(std::make_unique<Node>());
  Node* n = nodes_.back().get();
  n->graph_ = this;
  n->op_type_ = op_type;
  n->domain_ = std::string(domain);
  n->name_ = node_name.empty() ? unique_node_name(op_type) : std::move(node_name);
  node_names_.insert(n->name_);
  n->inputs_ = inputs;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i)
    if (inputs[i]) inputs[i]->uses.push_back({n, i});
  n->outputs_ = outputs;
  for (int i = 0; i < static_cast<int>(outputs.size()); ++i) {
    Value* v = outputs[i];
    if (!v) continue;
    if (v->producer || v->is_initializer())
      throw InvalidModel(fmt(n->describe(), ": output '", v->name, "' already has a producer"));
    v->producer = n;
    v->producer_output = i;
  }
  return n;
}

std::string Graph::unique_node_name(const std::string& op_type) {
  std::string name;
  do {
    name = op_type + "_" + std::to_string(next_node_id_++);
  } while (node_names_.count(name));
  return name;
}

void Graph::remove_node(Node* n) {
  for (int i = 0; i < n->num_inputs(); ++i) n->replace_input(i, nullptr);
  for (Value* v : n->outputs_)
    if (v) v->producer = nullptr;
  nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == n; }));
}

void Graph::move_before(const Node* n, const Node* anchor) {
  auto position = [&](const Node* x) {
    auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == x; });
    TRAINRT_CHECK(it != nodes_.end(), "node '", x->name(), "' is not in graph '", name, "'");
    return it;
  };
  auto from = position(n), to = position(anchor);
  if (from < to) std::rotate(from, from + 1, to);      // n lands just before anchor
  else if (to < from) std::rotate(to, from, from + 1);  // n lands where anchor was, anchor after it
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void Graph::rename_value(Value* v, const std::string& name) {
  if (v->name == name) return;
  if (by_name_.count(name)) throw InvalidModel(fmt("cannot rename '", v->name, "' to '", name, "': name taken"));
  by_name_.erase(v->name);
  v->name = name;
  by_name_[name] = v;
}

std::string Graph::unique_name(const std::string& base) const {
  if (!by_name_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = base + "_" + std::to_string(i);
    if (!by_name_.count(candidate)) return candidate;
  }
}

std::vector<Value*> Graph::initializers() const {
  std::vector<Value*> out;
  for (const auto& v : values_)
    if (v->is_initializer()) out.push_back(v.get());
  return out;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

// Kahn's algorithm, stable with respect to insertion order: of the nodes whose inputs are ready,
// the earliest inserted runs first, so an insertion order that is already a schedule is kept as it
// is. That order carries the producer's intent: torch.export lists nodes in the order eager ran
// them, and the gradient builder emits each forward node's gradient nodes together (input grad and
// weight grad), so a backward runs in eager autograd's order and each output gradient dies at its
// node. A depth-first order instead follows the longest chain first and leaves side branches (the
// weight-grad GEMMs) to the end, keeping every layer's (B*T, C) gradient live through the backward.
std::vector<Node*> Graph::topological_order() const {
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Node*, size_t> index;
  for (const auto& n : nodes_) {
    index[n.get()] = index.size();
    int count = 0;
    for (Value* v : n->inputs_)
      if (v && v->producer) ++count;
    pending[n.get()] = count;
  }
  // Min-heap of ready nodes by insertion index.
  auto later = [&](const Node* a, const Node* b) { return index[a] > index[b]; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (const auto& n : nodes_)
    if (pending[n.get()] == 0) ready.push(n.get());
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Value* out : n->outputs_) {
      if (!out) continue;
      for (const Use& u : out->uses)
        if (--pending[u.node] == 0) ready.push(u.node);
    }
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_)
      if (pending[n.get()] > 0)
        throw InvalidModel(fmt("graph '", name, "' has a cycle through ", n->describe()));
  }
  return order;
}

int Graph::opset(const std::string& domain) const {
  auto it = opsets_.find(domain);
  if (it != opsets_.end()) return it->second;
  if (domain == "ai.onnx") return opset("");
  return 0;
}

}  // namespace trainrt
