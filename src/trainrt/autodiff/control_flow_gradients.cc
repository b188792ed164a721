// The gradient of If(cond, implicit...) -> Y is another If over the same condition:
//   If(cond, implicit..., dY...) -> d implicit...
// whose branches are each forward branch's own joint graph: the branch run again, then its backward
// (autodiff/gradient_builder.h), its outputs the gradients of the implicit inputs the graph needs.
// Nothing inside a branch is saved for the backward; the implicit inputs are (the partition saves
// them as it saves any input of a backward node), and the branch is recomputed from them.
// A branch that does not reach an input gives it zeros (eager gives zeros where the other branch
// would have given a gradient, and None only where no branch reads it: the builder's unreached).
//
// Scan's gradient (scan_grad, below) is a reverse Scan over its body's joint graph, fed the states'
// history that a recompute of the forward Scan gives; Loop's (loop_grad) the same with a reverse Loop
// that reads each iteration's values from the histories.
#include <algorithm>
#include <map>
#include <memory>
#include <unordered_set>

#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/dtype.h"
#include "trainrt/core/error.h"
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

using Typed = std::pair<DType, Shape>;

// `body`'s joint graph (autodiff/gradient_builder.h) for a node's use of it: its inputs typed as the
// node feeds them (`types`), the gradients of its outputs `graded` fed as new inputs after the
// body's own (in that order), its outputs the gradients of its inputs `wrt` (in that order, zeros
// for one no graded output reaches).
std::shared_ptr<Graph> joint_body(const Node& node, const Graph& body, const std::vector<Typed>& types,
                                  const std::vector<size_t>& graded, const std::vector<size_t>& wrt) {
  std::shared_ptr<Graph> g = clone_graph(body);
  for (size_t i = 0; i < types.size(); ++i) {
    g->mutable_inputs()[i]->dtype = types[i].first;
    g->mutable_inputs()[i]->shape = types[i].second;
  }
  g->set_opset(std::string(kTrainrtDomain), 1);  // gradient ops
  with_error_context(fmt(node.describe(), ": differentiating its body"), [&] {
    infer_graph_shapes(*g);
    GradientRequest request;
    for (size_t j : graded) request.outputs_with_grad.push_back(g->outputs()[j]->name);
    for (size_t i : wrt) request.wrt.push_back(g->inputs()[i]->name);
    const GradientResult result = build_gradients(*g, request);
    std::vector<Value*> grads;
    for (const std::string& name : request.wrt) grads.push_back(g->find_value(result.grad_of.at(name)));
    g->mutable_outputs() = std::move(grads);
  });
  return g;
}

// The types of the node's inputs [first, first + count).
std::vector<Typed> input_types(const Node& node, size_t first, size_t count) {
  std::vector<Typed> out;
  for (size_t i = first; i < first + count; ++i)
    out.emplace_back(node.input(static_cast<int>(i))->dtype, node.input(static_cast<int>(i))->shape);
  return out;
}

Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::move(g);
  return a;
}

Value* zeros_like(GradContext& ctx, Value* v) {
  return ctx.emit("ConstantOfShape", {ctx.shape_of(v)}, {{"value", Attribute::of_tensor(Tensor::zeros(v->dtype, {1}))}});
}

// d v for each carried value (Loop) or state (Scan) `i` of `states`: the fed gradient of its final
// value, or zeros when none flows there.
std::vector<Value*> initial_state_grads(GradContext& ctx, const std::vector<size_t>& states, size_t first_input) {
  std::vector<Value*> out;
  for (size_t i : states) {
    Value* fed = ctx.output_grad(static_cast<int>(i));
    out.push_back(fed ? fed : zeros_like(ctx, ctx.input(static_cast<int>(first_input + i))));
  }
  return out;
}

// Adds to `g` a running sum per step gradient `steps[w]`: an input (the sum so far) and an Add (the
// sum after this step), appended to `inputs` and `outputs`.
void add_running_sums(Graph& g, const std::vector<Value*>& steps, std::vector<Value*>& inputs,
                      std::vector<Value*>& outputs) {
  for (Value* step : steps) {
    Value* sum = g.add_input(g.unique_name(step->name + "_sum"), step->dtype, step->shape);
    inputs.push_back(sum);
    outputs.push_back(g.add_node("Add", {sum, step}, {g.unique_name(step->name + "_summed")})->output(0));
  }
}

// Which of a loop node's values take part in its gradient (indices among the node's states or
// carried values, scan outputs, scan inputs and implicit inputs).
struct LoopGradients {
  std::vector<size_t> float_states;     // states / carried values of a float dtype: their gradients flow
  std::vector<size_t> graded_scans;     // scan outputs a gradient flows back from
  std::vector<size_t> wanted_inputs;    // Scan's scan inputs whose gradient the graph needs
  std::vector<size_t> wanted_implicit;  // implicit inputs whose gradient the graph needs
  bool wanted_state = false;            // some float state's initial value needs its gradient

  LoopGradients(GradContext& ctx, size_t first_state, size_t states, size_t scan_inputs, size_t scan_outputs,
                size_t implicit) {
    const size_t first_scan_input = first_state + states, first_implicit = first_scan_input + scan_inputs;
    for (size_t i = 0; i < states; ++i) {
      if (!is_floating(ctx.input(static_cast<int>(first_state + i))->dtype)) continue;
      float_states.push_back(i);
      wanted_state = wanted_state || ctx.needs_input_grad(static_cast<int>(first_state + i));
    }
    for (size_t j = 0; j < scan_outputs; ++j)
      if (ctx.output_grad(static_cast<int>(states + j))) graded_scans.push_back(j);
    for (size_t i = 0; i < scan_inputs; ++i)
      if (ctx.needs_input_grad(static_cast<int>(first_scan_input + i))) wanted_inputs.push_back(i);
    for (size_t i = 0; i < implicit; ++i)
      if (ctx.needs_input_grad(static_cast<int>(first_implicit + i))) wanted_implicit.push_back(i);
  }
  bool any() const { return wanted_state || !wanted_inputs.empty() || !wanted_implicit.empty(); }
};

// Hands the reverse loop's outputs (the float states' gradients, the implicit inputs' sums, then
// Scan's scan inputs') to the node's inputs.
void set_loop_input_grads(GradContext& ctx, const LoopGradients& which, const std::vector<Value*>& grads,
                          size_t first_state, size_t first_scan_input, size_t first_implicit) {
  size_t o = 0;
  for (size_t i : which.float_states) {
    const int input = static_cast<int>(first_state + i);
    if (ctx.needs_input_grad(input)) ctx.set_input_grad(input, grads[o]);
    ++o;
  }
  for (size_t i : which.wanted_implicit) ctx.set_input_grad(static_cast<int>(first_implicit + i), grads[o++]);
  for (size_t i : which.wanted_inputs) ctx.set_input_grad(static_cast<int>(first_scan_input + i), grads[o++]);
}

// Shape `s` without axis `axis` (a scan input's slice); unknown rank stays unknown.
Shape slice_shape(const Shape& s, int64_t axis) {
  if (!s.rank_known) return s;
  std::vector<Dim> dims = s.dims;
  dims.erase(dims.begin() + normalize_axis(axis, s.rank()));
  return Shape(std::move(dims));
}

std::vector<int64_t> as_ints(const std::vector<bool>& flags) { return {flags.begin(), flags.end()}; }

// The forward Scan again, its body giving each step's incoming states as scan outputs: the states'
// history, (steps, state dims...) each.
std::vector<Value*> scan_history(GradContext& ctx, const ScanSignature& s) {
  const Node& node = ctx.node();
  const size_t n = s.states;
  std::shared_ptr<Graph> h = clone_graph(body_of(node, "body"));
  std::vector<Value*> outs(h->outputs().begin(), h->outputs().begin() + static_cast<long>(n));
  for (size_t i = 0; i < n; ++i) outs.push_back(h->inputs()[i]);
  h->mutable_outputs() = std::move(outs);
  remove_unread_nodes(*h);
  std::vector<bool> keep(2 * n, false);
  std::fill(keep.begin() + static_cast<long>(n), keep.end(), true);
  std::map<std::string, Attribute> attrs{
      {"body", graph_attr(h)}, {"num_scan_inputs", Attribute::of_int(static_cast<int64_t>(s.scan_inputs))},
      {"scan_input_axes", Attribute::of_ints(s.input_axes)},
      {"scan_input_directions", Attribute::of_ints(as_ints(s.input_reverse))},
      {"scan_output_axes", Attribute::of_ints(std::vector<int64_t>(n, 0))},
      {"scan_output_directions", Attribute::of_ints(std::vector<int64_t>(n, 0))}};
  if (s.implicit) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(s.implicit));
  const std::vector<Value*> out = ctx.emit_multi("Scan", node.inputs(), static_cast<int>(2 * n), attrs, kOnnxDomain, keep);
  return {out.begin() + static_cast<long>(n), out.end()};
}

// The reverse Scan's body: the Scan body's joint graph with its inputs ordered as
//   states (d states' of the float states, the implicit inputs' gradient sums), scan inputs (the
//   history, the slices, the scan outputs' gradients), implicit values
// and its outputs (d states, the sums after this step, d slices).
std::shared_ptr<Graph> scan_reverse_body(const Node& node, const ScanSignature& s, const LoopGradients& which) {
  const size_t n = s.states, m = s.scan_inputs;
  std::vector<Typed> types = input_types(node, 0, n + m + s.implicit);
  for (size_t i = 0; i < m; ++i) types[n + i].second = slice_shape(types[n + i].second, s.input_axes[i]);
  std::vector<size_t> graded = which.float_states, wrt = which.float_states;
  for (size_t j : which.graded_scans) graded.push_back(n + j);
  for (size_t i : which.wanted_inputs) wrt.push_back(n + i);
  for (size_t i : which.wanted_implicit) wrt.push_back(n + m + i);
  std::shared_ptr<Graph> g = joint_body(node, body_of(node, "body"), types, graded, wrt);
  const std::vector<Value*> in(g->inputs().begin(), g->inputs().end()), grads(g->outputs().begin(), g->outputs().end());
  const size_t nf = which.float_states.size(), fed = n + m + s.implicit;  // fed gradients start there
  std::vector<Value*> inputs(in.begin() + static_cast<long>(fed), in.begin() + static_cast<long>(fed + nf));
  std::vector<Value*> outputs(grads.begin(), grads.begin() + static_cast<long>(nf));
  add_running_sums(*g, {grads.begin() + static_cast<long>(nf + which.wanted_inputs.size()), grads.end()}, inputs,
                   outputs);
  inputs.insert(inputs.end(), in.begin(), in.begin() + static_cast<long>(n + m));
  inputs.insert(inputs.end(), in.begin() + static_cast<long>(fed + nf), in.end());
  inputs.insert(inputs.end(), in.begin() + static_cast<long>(n + m), in.begin() + static_cast<long>(fed));
  outputs.insert(outputs.end(), grads.begin() + static_cast<long>(nf), grads.begin() + static_cast<long>(nf + which.wanted_inputs.size()));
  g->mutable_inputs() = std::move(inputs);
  g->mutable_outputs() = std::move(outputs);
  remove_unread_nodes(*g);
  return g;
}

// Scan's gradient (Scan-9 and later): the history (scan_history), then a Scan from the last step to
// the first over the body's joint graph (scan_reverse_body), carrying the states' gradients (from
// d final_states, or zeros) and the implicit inputs' gradient sums, reading each step's history,
// scan inputs and scan-output gradients, and giving the scan inputs' gradients at their steps'
// positions: every direction reversed, every axis kept.
void scan_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  const ScanSignature s = scan_signature(node);
  if (s.batched) throw UnsupportedOp(fmt(node.describe(), ": the gradient of Scan-8 (batched) is not supported"));
  const size_t n = s.states, m = s.scan_inputs;
  const LoopGradients which(ctx, 0, n, m, s.scan_outputs, s.implicit);
  if (!which.any()) return;
  const std::vector<Value*> history = n ? scan_history(ctx, s) : std::vector<Value*>{};
  std::vector<Value*> inputs = initial_state_grads(ctx, which.float_states, 0);
  for (size_t i : which.wanted_implicit) inputs.push_back(zeros_like(ctx, node.input(static_cast<int>(n + m + i))));
  std::vector<int64_t> in_axes(n, 0), in_dirs(n, 1), out_axes, out_dirs;  // the history, last step first
  inputs.insert(inputs.end(), history.begin(), history.end());
  for (size_t i = 0; i < m; ++i) {
    inputs.push_back(node.input(static_cast<int>(n + i)));
    in_axes.push_back(s.input_axes[i]);
    in_dirs.push_back(s.input_reverse[i] ? 0 : 1);
  }
  for (size_t j : which.graded_scans) {
    inputs.push_back(ctx.output_grad(static_cast<int>(n + j)));
    in_axes.push_back(s.output_axes[j]);
    in_dirs.push_back(s.output_reverse[j] ? 0 : 1);
  }
  for (size_t i = 0; i < s.implicit; ++i) inputs.push_back(node.input(static_cast<int>(n + m + i)));
  for (size_t i : which.wanted_inputs) {  // each slice's gradient where its slice was
    out_axes.push_back(s.input_axes[i]);
    out_dirs.push_back(s.input_reverse[i] ? 0 : 1);
  }
  std::map<std::string, Attribute> attrs{
      {"body", graph_attr(scan_reverse_body(node, s, which))},
      {"num_scan_inputs", Attribute::of_int(static_cast<int64_t>(n + m + which.graded_scans.size()))},
      {"scan_input_axes", Attribute::of_ints(in_axes)}, {"scan_input_directions", Attribute::of_ints(in_dirs)},
      {"scan_output_axes", Attribute::of_ints(out_axes)}, {"scan_output_directions", Attribute::of_ints(out_dirs)}};
  if (s.implicit) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(s.implicit));
  const size_t outputs = which.float_states.size() + which.wanted_implicit.size() + which.wanted_inputs.size();
  set_loop_input_grads(ctx, which, ctx.emit_multi("Scan", inputs, static_cast<int>(outputs), attrs), 0, n, n + m);
}

// The forward Loop again, its body giving each iteration's number and incoming carried values as
// scan outputs: (T) iteration numbers, then each carried value's history (T, dims...).
std::vector<Value*> loop_history(GradContext& ctx, const LoopSignature& s) {
  const Node& node = ctx.node();
  const size_t n = s.carried;
  std::shared_ptr<Graph> h = clone_graph(body_of(node, "body"));
  std::vector<Value*> outs(h->outputs().begin(), h->outputs().begin() + static_cast<long>(1 + n));
  for (size_t i = 0; i < n + 2; ++i)
    if (i != 1) outs.push_back(h->inputs()[i]);  // the iteration number, then each carried value
  h->mutable_outputs() = std::move(outs);
  remove_unread_nodes(*h);
  std::vector<bool> keep(2 * n + 1, true);
  std::fill(keep.begin(), keep.begin() + static_cast<long>(n), false);
  std::map<std::string, Attribute> attrs{{"body", graph_attr(h)}};
  if (s.implicit) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(s.implicit));
  const std::vector<Value*> out = ctx.emit_multi("Loop", node.inputs(), static_cast<int>(2 * n + 1), attrs, kOnnxDomain, keep);
  return {out.begin() + static_cast<long>(n), out.end()};
}

// The reverse Loop's body: the Loop body's joint graph, its inputs
//   k, condition, carried (d v' of the float carried values, the implicit inputs' gradient sums),
//   implicit (the enclosing values, each carried value's history, each graded scan output's
//   gradient, T - 1)
// and its outputs (condition, d v, the sums after this iteration). Iteration k differentiates the
// forward's iteration t = T-1-k: the body's iteration number is t, its carried values and fed
// scan-output gradients are the histories' rows t (Gather), and its condition is true (a body that
// ran saw it so).
std::shared_ptr<Graph> loop_reverse_body(const Node& node, const LoopSignature& s, const LoopGradients& which) {
  const size_t n = s.carried;
  std::vector<Typed> types = {{DType::kI64, Shape(std::vector<Dim>{})}, {DType::kBool, Shape(std::vector<Dim>{})}};
  for (const Typed& t : input_types(node, 2, n + s.implicit)) types.push_back(t);
  std::vector<size_t> graded, wrt;
  for (size_t i : which.float_states) graded.push_back(1 + i), wrt.push_back(2 + i);
  for (size_t j : which.graded_scans) graded.push_back(1 + n + j);
  for (size_t i : which.wanted_implicit) wrt.push_back(2 + n + i);
  std::shared_ptr<Graph> g = joint_body(node, body_of(node, "body"), types, graded, wrt);
  const std::vector<Value*> in(g->inputs().begin(), g->inputs().end()), grads(g->outputs().begin(), g->outputs().end());
  const size_t nf = which.float_states.size(), fed = 2 + n + s.implicit;  // fed gradients start there
  auto scalar = [&](const char* name, DType dtype) {
    return g->add_input(g->unique_name(name), dtype, Shape(std::vector<Dim>{}));
  };
  Value* k = scalar("reverse_iteration", DType::kI64);
  Value* cond = scalar("reverse_condition", DType::kBool);
  std::vector<Value*> inputs = {k, cond};
  std::vector<Value*> outputs = {g->add_node("Identity", {cond}, {g->unique_name("reverse_condition_out")})->output(0)};
  inputs.insert(inputs.end(), in.begin() + static_cast<long>(fed), in.begin() + static_cast<long>(fed + nf));
  outputs.insert(outputs.end(), grads.begin(), grads.begin() + static_cast<long>(nf));
  add_running_sums(*g, {grads.begin() + static_cast<long>(nf), grads.end()}, inputs, outputs);
  inputs.insert(inputs.end(), in.begin() + static_cast<long>(2 + n), in.begin() + static_cast<long>(fed));
  Value* last = scalar("last_iteration", DType::kI64);
  g->add_node_with_outputs("Sub", {last, k}, {in[0]});  // t = (T - 1) - k
  g->add_node_with_outputs("Identity", {cond}, {in[1]});
  auto row_t = [&](Value* v) {  // v becomes row t of a history input
    Value* history = g->add_input(g->unique_name(v->name + "_history"), v->dtype, Shape::unknown_rank());
    inputs.push_back(history);
    g->add_node_with_outputs("Gather", {history, in[0]}, {v})->set_attr("axis", Attribute::of_int(0));
  };
  for (size_t i = 0; i < n; ++i) row_t(in[2 + i]);
  for (size_t j = fed + nf; j < in.size(); ++j) row_t(in[j]);
  inputs.push_back(last);
  g->mutable_inputs() = std::move(inputs);
  g->mutable_outputs() = std::move(outputs);
  remove_unread_nodes(*g);
  return g;
}

// Loop's gradient: the history (loop_history), then a Loop of T iterations over the body's joint
// graph (loop_reverse_body), carrying the carried values' gradients (from d v_final, or zeros) and
// the enclosing values' gradient sums. The condition and M are not differentiable.
void loop_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  const LoopSignature s = loop_signature(node);
  const size_t n = s.carried;
  const LoopGradients which(ctx, 2, n, 0, s.scan_outputs, s.implicit);
  if (!which.any()) return;
  const std::vector<Value*> history = loop_history(ctx, s);
  Value* trips = ctx.emit("Reshape", {ctx.shape_of(history[0]), ctx.const_i64({})});  // T, a scalar
  Value* last = ctx.emit("Sub", {trips, ctx.scalar_like(trips, 1)});                   // T - 1
  std::vector<Value*> inputs = {trips, nullptr};
  for (Value* v : initial_state_grads(ctx, which.float_states, 2)) inputs.push_back(v);
  for (size_t i : which.wanted_implicit) inputs.push_back(zeros_like(ctx, node.input(static_cast<int>(2 + n + i))));
  for (size_t i = 0; i < s.implicit; ++i) inputs.push_back(node.input(static_cast<int>(2 + n + i)));
  inputs.insert(inputs.end(), history.begin() + 1, history.end());
  for (size_t j : which.graded_scans) inputs.push_back(ctx.output_grad(static_cast<int>(n + j)));
  inputs.push_back(last);
  const size_t implicit = s.implicit + n + which.graded_scans.size() + 1;
  std::map<std::string, Attribute> attrs{{"body", graph_attr(loop_reverse_body(node, s, which))},
                                         {std::string(kImplicitInputsAttr), Attribute::of_int(static_cast<int64_t>(implicit))}};
  const size_t outputs = which.float_states.size() + which.wanted_implicit.size();
  set_loop_input_grads(ctx, which, ctx.emit_multi("Loop", inputs, static_cast<int>(outputs), attrs), 2, 2 + n, 2 + n);
}

// Branch `attr`'s joint graph: inputs the implicit values then the gradients of `graded` outputs,
// outputs the gradients of the implicit inputs listed in `wanted` (indices among them).
std::shared_ptr<Graph> branch_gradient(const Node& node, const char* attr, const std::vector<size_t>& graded,
                                       const std::vector<size_t>& wanted) {
  std::shared_ptr<Graph> g = joint_body(node, body_of(node, attr), input_types(node, 1, node.inputs().size() - 1),
                                        graded, wanted);
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
  for (const char* branch : {"then_branch", "else_branch"}) attrs[branch] = graph_attr(branch_gradient(node, branch, graded, wanted));
  attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(inputs.size() - 1));
  const std::vector<Value*> grads = ctx.emit_multi("If", inputs, static_cast<int>(wanted.size()), attrs);
  for (size_t k = 0; k < wanted.size(); ++k) ctx.set_input_grad(static_cast<int>(1 + wanted[k]), grads[k]);
}

}  // namespace

void register_control_flow_gradients(GradientRegistry& r) {
  r.add(kOnnxDomain, "If", if_grad);
  r.add(kOnnxDomain, "Scan", scan_grad);
  r.add(kOnnxDomain, "Loop", loop_grad);
}

}  // namespace trainrt
