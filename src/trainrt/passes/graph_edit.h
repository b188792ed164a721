// Node building blocks the rewriting passes share (label_sparsity, padding_elimination): each adds
// a node whose output shapes are inferred at once, so the next rewrite can read them.
//
//   Value* flat = add_op(g, "Flatten", {x}, x->name + "/flat", kOnnxDomain, {{"axis", Attribute::of_int(1)}});
//   Node* copy = add_like(g, *node, inputs, "/kept");   // node's op and attributes, other inputs
//   remove_unread(g, replaced);                          // each removed once nothing reads it
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

// A node of `op` over `inputs` with one output named after `base`; returns that output.
Value* add_op(Graph& g, const std::string& op, std::vector<Value*> inputs, const std::string& base,
              std::string_view domain = kOnnxDomain, std::vector<std::pair<std::string, Attribute>> attrs = {});
// A node with `like`'s op, domain and attributes (but `overrides`) over `inputs`; its outputs,
// named like's + suffix, are the first and those of like's that something reads (a
// LayerNormalization's unread mean is left out).
Node* add_like(Graph& g, const Node& like, std::vector<Value*> inputs, std::string_view suffix,
               std::vector<std::pair<std::string, Attribute>> overrides = {});
// An i64 initializer holding `v`, named after base.
Value* i64_constant(Graph& g, const std::string& base, std::vector<int64_t> v);
// Removes each of `nodes` once nothing reads it (a node listed twice goes once).
void remove_unread(Graph& g, std::vector<Node*> nodes);
// Makes `out`, a value that lost its producer (a graph output whose node a rewrite replaced), the
// result of the node computing `v`, in v's place, when nothing else reads v: no Identity between
// them, whose output would be a view of v's storage, which the session keeps after handing the
// output over (runtime/execution_plan.h, views) until its next run. Otherwise out = Identity(v).
void become(Graph& g, Value* v, Value* out);
// Moves the nodes at insertion positions [first, end) before `anchor` (null: they stay last). A
// rewrite's nodes go where the node they replace was: the schedule keeps insertion order among
// ready nodes, and nodes left at the end would let every ready node before them run first (the
// backward's recomputes, hoisted to its start, all live at once).
void place_before(Graph& g, size_t first, const Node* anchor);
// Moves each node that reads only graph inputs and initializers (a weight's cast to bf16 under
// autocast, an embedding lookup) to just before its first reader in insertion order, which the
// schedule keeps: its output then lives from there, not from the start of the program, and the
// gradient builder, walking the forward backwards, makes its gradient right after its reader's.
// Returns how many nodes moved.
int sink_to_first_reader(Graph& g);

}  // namespace trainrt
