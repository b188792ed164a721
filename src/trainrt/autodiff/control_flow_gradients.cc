// The gradient of If(cond, implicit...) -> Y is another If over the same condition:
//   If(cond, implicit..., dY...) -> d implicit...
// whose branches are each forward branch's own joint graph: the branch run again, then its backward
// (autodiff/gradient_builder.h), its outputs the gradients of the implicit inputs the graph needs.
// Nothing inside a branch is saved for the backward; the implicit inputs are (the partition saves
// them as it saves any input of a backward node), and the branch is recomputed from them.
// A branch that does not reach an input gives it zeros (eager gives zeros where the other branch
// would have given a gradient, and None only where no branch reads it: the builder's unreached).
//
// Loop and Scan have no rule yet: differentiating through them throws UnsupportedOp naming the node.
#include <map>
#include <memory>
#include <unordered_set>

#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/ir/control_flow.h"
#include "trainrt/ir/graph_clone.h"
#include "trainrt/ops/control_flow_args.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

// Removes nodes none of whose outputs is read or a graph output (the branch's forward outputs that
// no gradient needs), until none is left.
void remove_unread_nodes(Graph& g) {
  for (bool removed = true; removed;) {
    removed = false;
    std::unordered_set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
    for (Node* n : g.nodes()) {
      bool read = false;
      for (const Value* v : n->outputs()) read = read || (v && (!v->uses.empty() || outputs.count(v)));
      if (read) continue;
      g.remove_node(n);
      removed = true;
    }
  }
}

// Branch `attr`'s joint graph: inputs the implicit values then the gradients of `graded` outputs,
// outputs the gradients of the implicit inputs listed in `wanted` (indices among them).
std::shared_ptr<Graph> branch_gradient(const Node& node, const char* attr, const std::vector<size_t>& graded,
                                       const std::vector<size_t>& wanted) {
  std::shared_ptr<Graph> g = clone_graph(body_of(node, attr));
  for (size_t i = 0; i < g->inputs().size(); ++i) {  // the forward's types
    const Value* outside = node.input(static_cast<int>(1 + i));
    g->mutable_inputs()[i]->dtype = outside->dtype;
    g->mutable_inputs()[i]->shape = outside->shape;
  }
  g->set_opset(std::string(kTrainrtDomain), 1);  // gradient ops
  with_error_context(fmt(node.describe(), ": differentiating '", attr, "'"), [&] {
    infer_graph_shapes(*g);
    GradientRequest request;
    for (size_t j : graded) request.outputs_with_grad.push_back(g->outputs()[j]->name);
    for (size_t i : wanted) request.wrt.push_back(g->inputs()[i]->name);
    const GradientResult result = build_gradients(*g, request);
    std::vector<Value*> grads;
    for (const std::string& name : request.wrt) grads.push_back(g->find_value(result.grad_of.at(name)));
    g->mutable_outputs() = std::move(grads);
  });
  remove_unread_nodes(*g);
  return g;
}

void if_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  std::vector<size_t> graded, wanted;
  for (int j = 0; j < node.num_outputs(); ++j)
    if (ctx.output_grad(j)) graded.push_back(static_cast<size_t>(j));
  for (int i = 1; i < node.num_inputs(); ++i)
    if (ctx.needs_input_grad(i)) wanted.push_back(static_cast<size_t>(i - 1));
  if (graded.empty() || wanted.empty()) return;
  std::vector<Value*> inputs(node.inputs().begin(), node.inputs().end());
  for (size_t j : graded) inputs.push_back(ctx.output_grad(static_cast<int>(j)));
  std::map<std::string, Attribute> attrs;
  for (const char* branch : {"then_branch", "else_branch"}) {
    Attribute a;
    a.kind = Attribute::Kind::kGraph;
    a.g = branch_gradient(node, branch, graded, wanted);
    attrs[branch] = std::move(a);
  }
  attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(inputs.size() - 1));
  const std::vector<Value*> grads = ctx.emit_multi("If", inputs, static_cast<int>(wanted.size()), attrs);
  for (size_t k = 0; k < wanted.size(); ++k) ctx.set_input_grad(static_cast<int>(1 + wanted[k]), grads[k]);
}

}  // namespace

void register_control_flow_gradients(GradientRegistry& r) {
  r.add(kOnnxDomain, "If", if_grad);
}

}  // namespace trainrt
