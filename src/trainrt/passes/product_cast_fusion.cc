#include "trainrt/passes/product_cast_fusion.h"

#include <algorithm>

#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/graph_edit.h"

namespace trainrt {
namespace {

// Whether `n` is a bf16 product without bias or beta that FusedMatMul can compute: MatMul of
// rank >= 2 operands, Gemm (alpha, transA, transB), or FusedMatMul with two inputs.
bool is_plain_bf16_product(const Node& n) {
  if (n.num_outputs() != 1 || !n.output(0) || n.output(0)->dtype != DType::kBF16) return false;
  for (int i : {0, 1})
    if (!n.input(i) || n.input(i)->dtype != DType::kBF16 || !n.input(i)->shape.rank_known ||
        n.input(i)->shape.rank() < 2)
      return false;
  if (n.op_type() == "FusedMatMul" && n.domain() == kTrainrtDomain)
    return n.num_inputs() == 2 || !n.input(2);
  if (n.domain() != kOnnxDomain) return false;
  if (n.op_type() == "MatMul") return true;
  return n.op_type() == "Gemm" && (n.num_inputs() == 2 || !n.input(2));
}

}  // namespace

bool ProductCastFusion::apply_impl(Graph& graph) const {
  std::vector<Node*> casts;
  for (Node* n : graph.nodes()) {
    if (n->op_type() != "Cast" || n->domain() != kOnnxDomain || !n->output(0) || n->output(0)->dtype != DType::kF32)
      continue;
    const Value* p = n->input(0);
    if (p && p->producer && p->uses.size() == 1 && !is_graph_output(graph, p) && is_plain_bf16_product(*p->producer))
      casts.push_back(n);
  }
  for (Node* cast : casts) {
    Node* product = cast->input(0)->producer;
    const std::vector<Value*> inputs = {product->input(0), product->input(1)};
    const std::string name = product->name();
    const bool trans_a = product->attr_int("transA", 0) != 0, trans_b = product->attr_int("transB", 0) != 0;
    const float alpha = product->attr_float("alpha", 1.f);
    Value* y = cast->output(0);
    const std::vector<Node*> order = graph.nodes();
    const auto next = std::find_if(std::find(order.begin(), order.end(), product) + 1, order.end(),
                                   [&](const Node* n) { return n != cast; });
    const Node* anchor = next != order.end() ? *next : nullptr;
    graph.remove_node(cast);
    graph.remove_node(product);
    const size_t first = static_cast<size_t>(graph.num_nodes());
    Node* fused = graph.add_node_with_outputs("FusedMatMul", inputs, {y}, kTrainrtDomain, name);
    if (trans_a) fused->set_attr("transA", Attribute::of_int(1));
    if (trans_b) fused->set_attr("transB", Attribute::of_int(1));
    if (alpha != 1.f) fused->set_attr("alpha", Attribute::of_float(alpha));
    fused->set_attr("output_dtype", Attribute::of_int(1));
    infer_and_store(*fused);
    place_before(graph, first, anchor);
  }
  return !casts.empty();
}

}  // namespace trainrt
