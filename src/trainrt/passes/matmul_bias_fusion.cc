#include "trainrt/passes/matmul_bias_fusion.h"

#include <algorithm>

namespace trainrt {
namespace {

// The bias operand of `add` when it is a (N) vector matching the last dim of `y`, else null.
Value* bias_of(const Node& add, const Value* y) {
  if (add.num_inputs() != 2) return nullptr;
  Value* bias = add.input(0) == y ? add.input(1) : add.input(0);
  if (!bias || bias == y || bias->dtype != y->dtype) return nullptr;
  if (!bias->shape.rank_known || bias->shape.rank() != 1 || !y->shape.rank_known || y->shape.rank() < 2)
    return nullptr;
  return bias->shape.dims[0] == y->shape.dims.back() ? bias : nullptr;
}

}  // namespace

bool MatMulBiasFusion::apply_impl(Graph& graph) const {
  struct Match {
    Node *mm, *add;
    Value* bias;
  };
  std::vector<Match> matches;  // found first: rewriting while walking would free nodes still listed
  for (Node* mm : graph.topological_order()) {
    if (mm->op_type() != "FusedMatMul" || mm->domain() != kTrainrtDomain || mm->num_inputs() != 2) continue;
    Value* y = mm->output(0);
    if (y->uses.size() != 1 || is_graph_output(graph, y)) continue;
    Node* add = y->uses[0].node;
    if (add->op_type() != "Add" || add->domain() != kOnnxDomain) continue;
    if (Value* bias = bias_of(*add, y)) matches.push_back({mm, add, bias});
  }
  for (const Match& m : matches) {
    const std::vector<Value*> inputs = {m.mm->input(0), m.mm->input(1), m.bias};
    const auto attrs = m.mm->attrs();
    const std::string name = m.mm->name();
    Value* z = m.add->output(0);
    graph.remove_node(m.add);
    graph.remove_node(m.mm);
    Node* fused = graph.add_node_with_outputs("FusedMatMul", inputs, {z}, kTrainrtDomain, name);
    for (const auto& [key, value] : attrs) fused->set_attr(key, value);
  }
  return !matches.empty();
}

}  // namespace trainrt
