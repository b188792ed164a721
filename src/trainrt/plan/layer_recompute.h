// Memory optimization levels (ORTModule's MEMORY_OPT_LEVEL, TRAINRT_MEMORY_OPT_LEVEL): which values of
// the model's repeated layers (transformer blocks) the backward recomputes instead of saving.
//
// Capture says which forward node belongs to which repeated layer (python/trainrt/capture/layers.py:
// the blocks of a ModuleList or Sequential of one class). The levels turn that into requests for
// rule 0 of the saved-value planner (saved_values.h, checkpoint_recompute.h), one region per layer,
// recomputed in the backward one layer at a time:
//   0: none (the default: the planner's cheap rules only);
//   1: everything inside each layer but the products' outputs (MatMul, Gemm, FusedMatMul, Conv,
//      ScaledDotProductAttention): those stay saved, so the backward reruns the pointwise ops, norms,
//      softmax and reshapes between them (their inputs are then recomputed, not saved). The one
//      product rerun is attention spelled out, q k^T feeding a Softmax: as ScaledDotProductAttention's
//      backward does, the scores are made again from q and k, not kept (batch, heads, T, T);
//   2: everything inside each layer, products included: the layer's inputs alone are saved, as
//      torch.utils.checkpoint around each block would (one forward of each layer again).
// Random nodes (dropout) are never recomputed (rule 0). Nodes of a torch.utils.checkpoint region keep
// that region: a checkpoint is an explicit request and wins over the level.
//
//   RecomputeRequest r = layer_recompute({.checkpoint_regions = {}, .layers = layer_of, .level = 1}, forward_nodes);
//   choose_saved_values(*joint, grads, r.regions, r.kept);
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/plan/recompute_subgraphs.h"

namespace trainrt {

struct MemoryRequest {
  std::map<std::string, int> checkpoint_regions;  // forward node name -> torch.utils.checkpoint region
  std::map<std::string, int> layers;              // forward node name -> repeated layer index (0, 1, ...)
  int level = 0;                                  // 0, 1 or 2
  RecomputeConfig config;                         // per-pattern choices (recompute_subgraphs.h)
};

struct RecomputeRequest {
  std::map<std::string, int> regions;  // forward node name -> region (checkpoint ids >= 0, layers < 0)
  std::set<std::string> kept;          // region nodes whose outputs stay saved (level 1's products)
  int layers_recomputed = 0;           // layers that became regions
};

// Throws InvalidModel for a level other than 0, 1, 2.
RecomputeRequest layer_recompute(const MemoryRequest& request, const std::vector<const Node*>& forward_nodes);

// Whether `n` is a product whose output level 1 keeps (a GEMM, convolution or fused attention).
bool is_product(const Node& n);

}  // namespace trainrt
