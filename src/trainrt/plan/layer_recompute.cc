#include "trainrt/plan/layer_recompute.h"

#include "trainrt/core/error.h"

namespace trainrt {

bool is_product(const Node& n) {
  static const std::set<std::string> kProducts = {"MatMul", "Gemm", "FusedMatMul", "Conv", "ConvTranspose",
                                                  "ScaledDotProductAttention", "Einsum"};
  return kProducts.count(n.op_type()) > 0;
}

namespace {

// Whether `n`'s output reaches a Softmax through elementwise ops alone (scale, mask, cast): the
// attention scores q k^T of a layer that spells attention out, which level 1 recomputes as a fused
// attention's backward does (from q and k), rather than keeping (batch, heads, T, T) of them.
bool is_attention_scores(const Node& n, int depth = 0) {
  static const std::set<std::string> kElementwise = {"Mul", "Div", "Add", "Sub", "Where", "Cast"};
  if (depth > 4) return false;
  for (const Value* v : n.outputs())
    if (v)
      for (const Use& u : v->uses) {
        if (u.node->op_type() == "Softmax") return true;
        if (kElementwise.count(u.node->op_type()) && is_attention_scores(*u.node, depth + 1)) return true;
      }
  return false;
}

}  // namespace

RecomputeRequest layer_recompute(const MemoryRequest& request, const std::vector<const Node*>& forward_nodes) {
  if (request.level < 0 || request.level > 2)
    throw InvalidModel(fmt("memory optimization level ", request.level, ": choose 0 (cheap recompute only), 1 "
                           "(each layer but its products' outputs) or 2 (each layer, products included)"));
  RecomputeRequest out;
  out.regions = request.checkpoint_regions;
  if (request.level == 0) return out;
  std::set<int> layers;
  for (const Node* n : forward_nodes) {
    auto layer = request.layers.find(n->name());
    if (layer == request.layers.end() || request.checkpoint_regions.count(n->name())) continue;
    out.regions[n->name()] = -1 - layer->second;  // layer ids apart from checkpoint ids (>= 0)
    layers.insert(layer->second);
    if (request.level == 1 && is_product(*n) && !is_attention_scores(*n)) out.kept.insert(n->name());
  }
  out.layers_recomputed = static_cast<int>(layers.size());
  return out;
}

}  // namespace trainrt
