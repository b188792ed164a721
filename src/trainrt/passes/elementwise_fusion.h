// ElementwiseFusion: chains and trees of elementwise ops become one FusedElementwise node
// (ops/fused_elementwise_schema.cc) whose body holds them, so that a kernel generated for the body
// (kernels/codegen/) reads each input and writes each result once, instead of one pass over memory
// per op.
//
//   x (B, T, D), w (D), r (B, T, 1)
//   a = Mul(x, r); b = Mul(w, a); c = Add(b, x)      ->   c = FusedElementwise(x, r, w) {body: the three}
//
// Stage invariants (what the rewrite keeps true):
// - A group's nodes all output the group's dims (statically equal, or dynamic dims that may be
//   equal: the kernel checks the real dims when it runs); inputs from outside the group may
//   broadcast to those dims. An op whose output is smaller (the (B, T, 1) of a norm's statistics)
//   starts a group of its own.
// - Values read outside the group (or graph outputs) stay values: the fused node outputs them.
//   Values read only inside the group exist no more.
// - No cycle: a node joins a group only when none of its other inputs depends on the group
//   (with every group counted as one node).
// - f32 and bf16 values (and bool conditions) only, one float dtype per op but a Cast between the
//   two; random ops (Dropout) never join.
// - f32 scalar initializers (eps, 0.5) and Pow's exponent move into the body as constants.
//
// `accept` sees every group's body at once (codegen compiles them in one unit) and says which
// may be fused; the others stay as they were. A group of one node is never formed.
//
//   ElementwiseFusion pass([](const std::vector<const Graph*>& bodies) { return compile(bodies); });
//   pass.apply(graph);
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "trainrt/passes/pass.h"

namespace trainrt {

class ElementwiseFusion : public Pass {
 public:
  using Accept = std::function<std::vector<bool>(const std::vector<const Graph*>& bodies)>;
  // Nodes reading a value named in `leave_readers_of` stay unfused (a backward's output gradients,
  // which may be zeros that ZeroInputElimination removes the readers of, op by op).
  explicit ElementwiseFusion(Accept accept, std::set<std::string> leave_readers_of = {})
      : accept_(std::move(accept)), leave_readers_of_(std::move(leave_readers_of)) {}
  std::string_view name() const override { return "ElementwiseFusion"; }
  // Whether the pass knows how to fuse `node` (op, attributes, dtypes).
  static bool fusible(const Node& node);

 protected:
  bool apply_impl(Graph& graph) const override;

 private:
  Accept accept_;
  std::set<std::string> leave_readers_of_;
};

}  // namespace trainrt
