#include "trainrt/passes/transpose_into_product.h"

#include <algorithm>
#include <map>
#include <string>

#include "trainrt/passes/graph_edit.h"

namespace trainrt {
namespace {

// Whether `t` is a Transpose swapping exactly the last two of its input's axes.
bool swaps_last_two(const Node& t) {
  if (t.op_type() != "Transpose" || t.domain() != kOnnxDomain || t.num_inputs() != 1) return false;
  const Value* x = t.input(0);
  if (!x || !x->shape.rank_known || x->shape.rank() < 2 || !t.has_attr("perm")) return false;
  const std::vector<int64_t> perm = t.attr_ints("perm", {});
  const int64_t r = static_cast<int64_t>(x->shape.rank());
  if (static_cast<int64_t>(perm.size()) != r) return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[static_cast<size_t>(i)] != i) return false;
  return perm[static_cast<size_t>(r - 2)] == r - 1 && perm[static_cast<size_t>(r - 1)] == r - 2;
}

bool rank_at_least_2(const Value* v) { return v && v->shape.rank_known && v->shape.rank() >= 2; }

// The product kinds this pass rewrites, and whether `n` is one it may.
bool is_foldable_product(const Node& n) {
  if (n.domain() == kTrainrtDomain && n.op_type() == "FusedMatMul") return true;
  if (n.domain() != kOnnxDomain) return false;
  if (n.op_type() == "Gemm") return true;
  // FusedMatMul multiplies floating types only (an integer MatMul stays as it is).
  const DType t = n.input(0) ? n.input(0)->dtype : DType::kUndefined;
  const bool floating = t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
  return n.op_type() == "MatMul" && floating && rank_at_least_2(n.input(0)) && rank_at_least_2(n.input(1));
}

// Whether operand `i` of product `n` is a Transpose this pass folds (a Gemm's only when 2-D).
bool folds_operand(const Node& n, int i) {
  const Value* in = n.input(static_cast<size_t>(i));
  return in && in->producer && swaps_last_two(*in->producer) && (n.op_type() != "Gemm" || in->shape.rank() == 2);
}

}  // namespace

bool TransposeIntoProduct::apply_impl(Graph& graph) const {
  std::vector<Node*> products;  // found first: rewriting while walking would free nodes still listed
  for (Node* n : graph.nodes())
    if (is_foldable_product(*n) && (folds_operand(*n, 0) || folds_operand(*n, 1))) products.push_back(n);
  std::vector<Node*> transposes;
  for (Node* n : products) {
    std::vector<Value*> inputs = n->inputs();
    std::map<std::string, Attribute> attrs = n->attrs();
    const bool gemm = n->op_type() == "Gemm";
    const char* flags[2] = {"transA", "transB"};
    for (int i = 0; i < 2; ++i) {
      if (!folds_operand(*n, i)) continue;
      Value* in = inputs[static_cast<size_t>(i)];
      transposes.push_back(in->producer);
      inputs[static_cast<size_t>(i)] = in->producer->input(0);
      attrs[flags[i]] = Attribute::of_int(n->attr_int(flags[i], 0) ? 0 : 1);
    }
    const std::string name = n->name(), op = gemm ? "Gemm" : "FusedMatMul";
    const std::string_view domain = gemm ? kOnnxDomain : kTrainrtDomain;
    std::vector<Value*> outputs = n->outputs();
    const std::vector<Node*> order = graph.nodes();
    const auto at = std::find(order.begin(), order.end(), n);
    const Node* anchor = at + 1 == order.end() ? nullptr : *(at + 1);
    graph.remove_node(n);
    Node* folded = graph.add_node_with_outputs(op, inputs, outputs, domain, name);
    for (const auto& [key, value] : attrs) folded->set_attr(key, value);
    if (anchor) graph.move_before(folded, anchor);
  }
  remove_unread(graph, transposes);
  return !products.empty();
}

}  // namespace trainrt
