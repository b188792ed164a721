// Activation checkpointing in the engine: the forward nodes of each checkpointed region (marked at
// capture: python/trainrt/capture/checkpoint_regions.py) have their outputs recomputed in the
// backward from the region's inputs instead of saved, as torch.utils.checkpoint does in eager.
//
// For region k, the backward readers of a value made inside k read a copy instead, computed in the
// backward from copies of its producers, back to values made outside k, which the backward then
// reads (saved, when the forward made them). These stay read as they are, never copied:
//   - the region's outputs: values that forward nodes outside the region read (the next region's
//     input, saved anyway) or that are graph outputs; a Shape or Size reader, which needs only the
//     dims, does not make a value an output;
//   - the outputs of random nodes (Dropout, attention with dropout, PythonOp), which another run
//     would not reproduce: they are saved as without checkpointing.
// Each copy is placed just before its first backward reader (or the first copy reading it), so it
// lives during that region's backward only, from where the backward first needs it: one region's
// activations at a time, and within the region the values read late made late.
//
// Run on the joint graph after build_gradients and before partition_joint_graph (saved_values.h
// runs it after moving Shape nodes to the forward).
//
//   int recomputed = recompute_checkpoint_regions(*joint, grads, {{"mlp/fc1", 1}, {"mlp/gelu", 1}});
#pragma once

#include <map>
#include <set>
#include <string>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// `regions`: forward node name -> region id. `kept`: region nodes whose outputs are saved rather than
// recomputed (memory level 1 keeps the products': layer_recompute.h); they stay members, so that
// reading a value made in the region does not make it a region output. Returns how many nodes were
// copied into the backward.
int recompute_checkpoint_regions(Graph& joint, const GradientResult& gradients,
                                 const std::map<std::string, int>& regions,
                                 const std::set<std::string>& kept = {});

// "<name>/recompute" for a copy of node `name`, with "_1", "_2"... when a copy of it is there
// already (two recompute subgraphs may both copy one node): node names stay unique, as ONNX needs.
std::string recompute_node_name(const Graph& g, const std::string& name);

// The same copy for one forward subgraph (recompute_subgraphs.h): every backward reader of a value
// `nodes` make reads a copy computed in the backward from the values they read from outside, which
// the backward then reads instead; only graph outputs and random nodes' outputs stay read as they
// are. Returns how many nodes were copied.
int recompute_subgraph(Graph& joint, const GradientResult& gradients, const std::vector<const Node*>& nodes);

}  // namespace trainrt
