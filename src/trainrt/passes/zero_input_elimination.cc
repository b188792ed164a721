#include "trainrt/passes/zero_input_elimination.h"

#include <algorithm>
#include <map>

#include "trainrt/autodiff/gradient_builder.h"

namespace trainrt {
namespace {

// Ops whose outputs are all zero when the input at one of the listed positions is zero (and, for
// the products, when they have no added bias input). Keyed by (domain, op).
const std::map<std::pair<std::string_view, std::string_view>, std::vector<int>>& zero_preserving() {
  static const std::map<std::pair<std::string_view, std::string_view>, std::vector<int>> table = {
      {{kOnnxDomain, "Reshape"}, {0}},       {{kOnnxDomain, "Flatten"}, {0}},
      {{kOnnxDomain, "Squeeze"}, {0}},       {{kOnnxDomain, "Unsqueeze"}, {0}},
      {{kOnnxDomain, "Identity"}, {0}},      {{kOnnxDomain, "Transpose"}, {0}},
      {{kOnnxDomain, "Cast"}, {0}},          {{kOnnxDomain, "Expand"}, {0}},
      {{kOnnxDomain, "Slice"}, {0}},         {{kOnnxDomain, "Neg"}, {0}},
      {{kOnnxDomain, "Gather"}, {0}},
      {{kOnnxDomain, "ReduceSum"}, {0}},     {{kOnnxDomain, "ReduceMean"}, {0}},
      {{kOnnxDomain, "Mul"}, {0, 1}},        {{kOnnxDomain, "Div"}, {0}},
      {{kOnnxDomain, "MatMul"}, {0, 1}},     {{kOnnxDomain, "Gemm"}, {0, 1}},
      {{kTrainrtDomain, "FusedMatMul"}, {0, 1}},
      {{kTrainrtDomain, "ReduceSumToShape"}, {0}},
      {{kTrainrtDomain, "LayerNormalizationGrad"}, {0}},
      {{kTrainrtDomain, "DropoutGrad"}, {0}},
      {{kTrainrtDomain, "GeluGrad"}, {0}},   {{kTrainrtDomain, "TanhGrad"}, {0}},
      {{kTrainrtDomain, "SigmoidGrad"}, {0}}, {{kTrainrtDomain, "ReluGrad"}, {0}},
      {{kTrainrtDomain, "LeakyReluGrad"}, {0}},
      {{kTrainrtDomain, "GatherGrad"}, {2}}, {{kTrainrtDomain, "GatherElementsGrad"}, {2}},
      {{kTrainrtDomain, "SoftmaxCrossEntropyLossGrad"}, {0}},
      {{kTrainrtDomain, "NegativeLogLikelihoodLossGrad"}, {0}},
  };
  return table;
}

// A constant whose every element is zero (Where's other branch in a gradient: Where(c, dY, 0)).
bool zero_constant(const Value* v) {
  if (!v || !v->is_initializer()) return false;
  const Tensor& t = v->data;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kF32 && t.data<float>()[i] != 0.f) return false;
    if (t.dtype() == DType::kF64 && t.data<double>()[i] != 0.0) return false;
  }
  return t.dtype() == DType::kF32 || t.dtype() == DType::kF64;
}

bool makes_zero(const Node& n, const std::set<const Value*>& zero) {
  if (n.domain() == kOnnxDomain && n.op_type() == "Where")  // zero where both branches are
    return (zero.count(n.input(1)) || zero_constant(n.input(1))) && (zero.count(n.input(2)) || zero_constant(n.input(2)));
  auto it = zero_preserving().find({n.domain(), n.op_type()});
  if (it == zero_preserving().end()) return false;
  // A product with a bias (Gemm's C, FusedMatMul's third input) adds it: not zero.
  const bool product = n.op_type() == "Gemm" || n.op_type() == "FusedMatMul";
  if (product && n.input(2) != nullptr) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](int i) { return zero.count(n.input(i)) > 0; });
}

// GatherGrad with an addend (input 3): its result is the addend plus the scatter of dY.
bool accumulates_onto_addend(const Node& n) {
  return n.domain() == kTrainrtDomain && n.op_type() == "GatherGrad" && n.input(3) != nullptr;
}

bool same_type(const Value* a, const Value* b) {
  return a->dtype == b->dtype && a->shape.known_equal(b->shape);
}

// Makes `node`'s result `v` instead: readers read v, or an Identity keeps a graph output's value.
void replace_with(Graph& graph, Node* node, Value* v) {
  Value* out = node->output(0);
  if (is_graph_output(graph, out)) {
    graph.remove_node(node);
    graph.add_node_with_outputs("Identity", {v}, {out});
    return;
  }
  const std::vector<Use> uses = out->uses;
  for (const Use& u : uses) u.node->replace_input(u.input_index, v);
  graph.remove_node(node);
}

}  // namespace

int remove_unread_nodes(Graph& graph) {
  int removed = 0;
  for (bool again = true; again;) {
    again = false;
    std::vector<Node*> order = graph.topological_order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (is_read(graph, *n)) continue;
      graph.remove_node(n);
      ++removed;
      again = true;
    }
  }
  return removed;
}

bool ZeroInputElimination::apply_impl(Graph& graph) const {
  std::set<const Value*> zero;
  for (const std::string& name : zero_inputs_)
    if (const Value* v = graph.find_value(name)) zero.insert(v);
  if (zero.empty()) return false;
  bool changed = false;
  for (Node* n : graph.topological_order()) {
    if (accumulates_onto_addend(*n)) {  // GatherGrad(shape, indices, dY, addend): a sum of two
      const bool zero_dy = zero.count(n->input(2)) > 0, zero_addend = zero.count(n->input(3)) > 0;
      if (zero_dy && zero_addend) {
        zero.insert(n->output(0));
      } else if (zero_dy) {
        replace_with(graph, n, n->input(3));
        changed = true;
      } else if (zero_addend) {
        n->replace_input(3, nullptr);
        changed = true;
      }
      continue;
    }
    if (makes_zero(*n, zero)) {
      for (const Value* o : n->outputs())
        if (o) zero.insert(o);
      continue;
    }
    const bool sum = n->domain() == kOnnxDomain && (n->op_type() == "Sum" || n->op_type() == "Add");
    if (!sum) continue;
    std::vector<Value*> kept;
    for (Value* v : n->inputs())
      if (!zero.count(v)) kept.push_back(v);
    if (kept.size() == n->inputs().size()) continue;
    Value* out = n->output(0);
    if (kept.empty()) {
      zero.insert(out);
      continue;
    }
    const bool shaped = is_gradient_sum(*n) || std::any_of(kept.begin(), kept.end(), [&](const Value* v) {
      return same_type(v, out);
    });
    if (!shaped) continue;
    if (kept.size() == 1) {
      replace_with(graph, n, kept[0]);
    } else {
      graph.remove_node(n);
      graph.add_node_with_outputs("Sum", kept, {out});
    }
    changed = true;
  }
  return remove_unread_nodes(graph) > 0 || changed;
}

}  // namespace trainrt
