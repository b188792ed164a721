// ZeroInputElimination: simplifies a graph for runs where some of its inputs hold zeros.
//
// A backward program takes one gradient per model output; autograd gives none for an output the
// loss does not use (a language model's logits, returned beside its loss), and the engine would
// feed zeros and then run their whole path: a (batch, seq, vocab) zero gradient added to the
// loss's, matrix products of zeros. As in eager, where an absent gradient is never computed with,
// this pass drops that work:
//   - an op that gives zeros when one given input is zero (a product, a reshape, a grad op linear
//     in dY: the table in the .cc) makes its outputs zero;
//   - a Sum or Add of zero and non-zero operands becomes the non-zero ones, when one of them
//     already has the result's dtype and shape (no broadcast is lost), as in the autodiff's own
//     Sums of a value's gradient contributions (autodiff/gradient_builder.h is_gradient_sum);
//   - nodes nothing reads any more are removed.
// A zero that reaches something else (a graph output, an op outside the table) keeps the nodes
// that compute it, from the zero input: still correct, just not cheaper. Graph inputs and outputs
// are never changed, so the simplified graph runs with the same arguments.
//
//   ZeroInputElimination pass({"logits_grad"});
//   pass.apply(backward_graph);   // Sum(logits_grad, dlogits) -> dlogits, logits_grad unread
#pragma once

#include <set>
#include <string>

#include "trainrt/passes/pass.h"

namespace trainrt {

class ZeroInputElimination : public Pass {
 public:
  explicit ZeroInputElimination(std::set<std::string> zero_inputs) : zero_inputs_(std::move(zero_inputs)) {}
  std::string_view name() const override { return "ZeroInputElimination"; }

 protected:
  bool apply_impl(Graph& graph) const override;

 private:
  std::set<std::string> zero_inputs_;
};

// Removes nodes none of whose outputs is read or a graph output, until none is left; returns how
// many went.
int remove_unread_nodes(Graph& graph);

}  // namespace trainrt
