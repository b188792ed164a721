#include "trainrt/passes/common_subexpression_elimination.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

template <typename T>
void append_bytes(std::string& key, const T* data, size_t count) {
  key.append(reinterpret_cast<const char*>(data), count * sizeof(T));
}

void append_string(std::string& key, const std::string& s) {
  const size_t n = s.size();
  append_bytes(key, &n, 1);
  key += s;
}

// Appends an exact, unambiguous encoding of `a` (lengths before contents); false for a graph
// attribute, which the pass does not compare.
bool append_attribute(std::string& key, const Attribute& a) {
  key += static_cast<char>(a.kind);
  switch (a.kind) {
    case Attribute::Kind::kFloat: append_bytes(key, &a.f, 1); return true;  // bits: -0.0 and NaN stay apart
    case Attribute::Kind::kInt: append_bytes(key, &a.i, 1); return true;
    case Attribute::Kind::kString: append_string(key, a.s); return true;
    case Attribute::Kind::kFloats: {
      const size_t n = a.floats.size();
      append_bytes(key, &n, 1);
      append_bytes(key, a.floats.data(), n);
      return true;
    }
    case Attribute::Kind::kInts: {
      const size_t n = a.ints.size();
      append_bytes(key, &n, 1);
      append_bytes(key, a.ints.data(), n);
      return true;
    }
    case Attribute::Kind::kStrings: {
      const size_t n = a.strings.size();
      append_bytes(key, &n, 1);
      for (const std::string& s : a.strings) append_string(key, s);
      return true;
    }
    case Attribute::Kind::kTensor: {
      const DType dtype = a.t.dtype();
      const size_t rank = a.t.dims().size(), bytes = a.t.nbytes();
      append_bytes(key, &dtype, 1);
      append_bytes(key, &rank, 1);
      append_bytes(key, a.t.dims().data(), rank);
      append_bytes(key, &bytes, 1);
      append_bytes(key, static_cast<const char*>(a.t.raw()), bytes);
      return true;
    }
    case Attribute::Kind::kGraph: return false;
  }
  return false;
}

// What `n` computes, as a string equal for two nodes exactly when they compute the same thing;
// empty when `n` may not be merged.
std::string key_of(const std::unordered_set<const Value*>& graph_outputs, const Node& n) {
  const OpSchema* schema = OpRegistry::global().find(n.domain(), n.op_type());
  if (!schema || !schema->deterministic) return {};  // Dropout; PythonOp (the user's Python may keep state)
  for (const Value* v : n.outputs())
    if (v && graph_outputs.count(v)) return {};
  std::string key;
  append_string(key, n.domain());
  append_string(key, n.op_type());
  const size_t num_inputs = n.inputs().size(), num_outputs = n.outputs().size();
  append_bytes(key, &num_inputs, 1);
  for (const Value* v : n.inputs()) append_bytes(key, &v, 1);  // the value itself: null for an omitted one
  append_bytes(key, &num_outputs, 1);
  for (const Value* v : n.outputs()) key += v ? '1' : '0';  // which optional outputs exist
  for (const auto& [name, a] : n.attrs()) {
    append_string(key, name);
    if (!append_attribute(key, a)) return {};
  }
  return key;
}

}  // namespace

bool CommonSubexpressionElimination::apply_impl(Graph& graph) const {
  const std::unordered_set<const Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  std::unordered_map<std::string, Node*> first;
  std::vector<Node*> duplicates;
  for (Node* n : graph.topological_order()) {
    std::string key = key_of(graph_outputs, *n);
    if (key.empty()) continue;
    auto [it, inserted] = first.try_emplace(std::move(key), n);
    if (inserted) continue;
    // Readers move to the first node's outputs now, so nodes after them key on those.
    for (int o = 0; o < n->num_outputs(); ++o) {
      Value* dup = n->output(o);
      if (!dup) continue;
      const std::vector<Use> uses = dup->uses;
      for (const Use& u : uses) u.node->replace_input(u.input_index, it->second->output(o));
    }
    duplicates.push_back(n);
  }
  for (Node* n : duplicates) graph.remove_node(n);
  return !duplicates.empty();
}

}  // namespace trainrt
