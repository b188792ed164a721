// The memory optimizer's recompute subgraphs (ORTModule's MemoryOptimizer, and its
// MEMORY_OPT_CONFIG): for each value the backward still reads from the forward after the
// saved-value rules (saved_values.h), the forward subgraph that could make it again in the
// backward from values the backward reads anyway, so that it need not be saved.
//
// Finding one. Saved values of a static size under kSmallBytes (shapes, masks) are left alone.
// From the saved value S, walk up its producers, taking a producer into the subgraph
// when it is deterministic, of the recomputable ops below, and the subgraph stays under
// kMaxRecomputeNodes nodes. An input of a taken node is a boundary when the backward reads it
// anyway: a forward input or initializer, a graph output (the caller holds it), or a forward value
// some backward node reads. An input that is none of these and whose producer cannot be taken
// ends the search: recomputing S would mean saving that input instead (ORTModule's "compromised"
// recompute, not done here). Shape and Size readers of a taken value stay in the forward.
//
// Its string is the op types producers first, each followed by '+' (ORTModule's format):
// "LayerNormalization+", "Transpose+MatMul+Mul+Where+Softmax+". Subgraphs of one string are
// occurrences of one pattern (one per transformer layer, typically).
//
// Patterns are found once, on the graph the saved-value rules left, so that a string does not
// depend on which other patterns the config turns on.
//
// Choosing. An occurrence is recomputed when the config names its pattern with 1 (up to the count
// given, in forward order; -1 for all), and not when it names it with 0. A pattern the config does
// not name is recomputed when it is cheap (the default, memory level 0): pointwise ops, views,
// casts and norms only, no product or softmax, and the bytes its nodes read and write at most
// kCheapBytesPerFreed times the bytes it frees (an estimate from the symbolic shapes: a LayerNorm
// output reads X and writes Y, 2 bytes per byte freed). Chosen occurrences are applied one at a
// time, each found again on the graph as the earlier ones left it: where an earlier one stopped
// saving a value this one read, its subgraph reaches back through that value's producers too (a
// default one only while it stays cheap), so that no copy reads a value nobody saves any more. The copies go into the backward through
// recompute_subgraph (checkpoint_recompute.h), the mechanism checkpointed regions use.
//
//   RecomputeConfig config = parse_memory_opt_config("LayerNormalization+:1:-1,Softmax+:0:-1");
//   std::vector<RecomputePattern> summary = recompute_subgraphs(*joint, grads, config);
//   // summary[0]: {"LayerNormalization+", "(s0, s1, 256) f32", 9 found, 9 applied, ...}
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

inline constexpr int kMaxRecomputeNodes = 16;
inline constexpr double kCheapBytesPerFreed = 4.0;
inline constexpr size_t kSmallBytes = 64 * 1024;  // saved values of a static size under this are left alone

struct RecomputeChoice {
  bool on = true;   // 1: recompute; 0: keep saving
  int count = -1;   // how many occurrences, in forward order; -1: all
};

// Pattern string -> choice.
using RecomputeConfig = std::map<std::string, RecomputeChoice>;

// ORTModule's format: "<pattern>:<0|1>:<count>" items separated by commas ("Gelu+:1:-1,Cast+:0:-1").
// Throws InvalidModel naming the item when one is malformed; type 2 (compromised recompute) is
// refused with the alternative (memory level 2).
RecomputeConfig parse_memory_opt_config(const std::string& text);

// One pattern of the summary (ORTModule's "MemoryOptimizer Summary").
struct RecomputePattern {
  std::string pattern;
  std::string freed;          // the value each occurrence frees: its shape and dtype, "(s0, s1, 256) f32"
  std::string freed_bytes;    // bytes per occurrence: a number, or a product with the symbolic dims
  int found = 0;              // occurrences found
  int applied = 0;            // occurrences recomputed
  bool cheap = false;         // within the default's cost bound
  std::string config;         // "" when the config does not name it, else "1:-1", "0:3"...
};

// Applies the chosen occurrences to `joint` (after choose_saved_values' rules) and returns every
// pattern found, in order of first occurrence. Config entries that match no pattern are returned
// too, with found = 0, so that a misspelt pattern shows. `cheap_by_default` off (the compute
// optimizer off): only what the config asks for.
std::vector<RecomputePattern> recompute_subgraphs(Graph& joint, GradientResult& gradients,
                                                  const RecomputeConfig& config, bool cheap_by_default = true);

}  // namespace trainrt
