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
#include "trainrt/ir/control_flow.h"
#include "trainrt/ir/graph_clone.h"
#include "trainrt/core/error.h"
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

Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::move(g);
  return a;
}

Attribute ints_attr(const std::vector<int64_t>& v) { return Attribute::of_ints(v); }

Value* zeros_like(GradContext& ctx, Value* v) {
  return ctx.emit("ConstantOfShape", {ctx.shape_of(v)}, {{"value", Attribute::of_tensor(Tensor::zeros(v->dtype, {1}))}});
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16; }

// Shape `s` without axis `axis` (a scan input's slice); unknown rank stays unknown.
Shape slice_shape(const Shape& s, int64_t axis) {
  if (!s.rank_known) return s;
  std::vector<Dim> dims = s.dims;
  dims.erase(dims.begin() + normalize_axis(axis, s.rank()));
  return Shape(std::move(dims));
}

// Scan's gradient, in two Scans (Scan-9 and later):
//   history: the forward Scan again, its body giving each step's incoming states as scan outputs
//            (the states' history, stacked on axis 0);
//   reverse: a Scan from the last step to the first over the body's joint graph, carrying the
//            states' gradients (from d final_states, or zeros) and the sums of the implicit inputs'
//            gradients, reading each step's history, scan inputs and scan-output gradients, and
//            giving the scan inputs' gradients at their steps' positions.
void scan_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  const ScanSignature s = scan_signature(node);
  if (s.batched) throw UnsupportedOp(fmt(node.describe(), ": the gradient of Scan-8 (batched) is not supported"));
  const size_t n = s.states, m = s.scan_inputs, k = s.scan_outputs, imp = s.implicit;
  std::vector<size_t> float_states, graded_scans, wanted_inputs, wanted_implicit;
  for (size_t i = 0; i < n; ++i)
    if (is_float(node.input(static_cast<int>(i))->dtype)) float_states.push_back(i);
  for (size_t j = 0; j < k; ++j)
    if (ctx.output_grad(static_cast<int>(n + j))) graded_scans.push_back(j);
  for (size_t i = 0; i < m; ++i)
    if (ctx.needs_input_grad(static_cast<int>(n + i))) wanted_inputs.push_back(i);
  for (size_t i = 0; i < imp; ++i)
    if (ctx.needs_input_grad(static_cast<int>(n + m + i))) wanted_implicit.push_back(i);
  bool wanted_state = false;
  for (size_t i : float_states) wanted_state = wanted_state || ctx.needs_input_grad(static_cast<int>(i));
  if (!wanted_state && wanted_inputs.empty() && wanted_implicit.empty()) return;
  const Graph& body = body_of(node, "body");
  const std::vector<Value*> inputs(node.inputs().begin(), node.inputs().end());

  // The history of the states: body(states, slices, implicit) -> (states', states).
  std::vector<Value*> history;
  if (n > 0) {
    std::shared_ptr<Graph> h = clone_graph(body);
    std::vector<Value*> outs(h->outputs().begin(), h->outputs().begin() + static_cast<long>(n));
    for (size_t i = 0; i < n; ++i) outs.push_back(h->inputs()[i]);
    h->mutable_outputs() = std::move(outs);
    remove_unread_nodes(*h);
    std::vector<bool> keep(2 * n, false);
    std::fill(keep.begin() + static_cast<long>(n), keep.end(), true);
    std::map<std::string, Attribute> attrs{
        {"body", graph_attr(h)}, {"num_scan_inputs", Attribute::of_int(static_cast<int64_t>(m))},
        {"scan_input_axes", ints_attr(s.input_axes)},
        {"scan_input_directions", ints_attr(std::vector<int64_t>(s.input_reverse.begin(), s.input_reverse.end()))},
        {"scan_output_axes", ints_attr(std::vector<int64_t>(n, 0))},
        {"scan_output_directions", ints_attr(std::vector<int64_t>(n, 0))}};
    if (imp) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(imp));
    std::vector<Value*> outs_h = ctx.emit_multi("Scan", inputs, static_cast<int>(2 * n), attrs, kOnnxDomain, keep);
    history.assign(outs_h.begin() + static_cast<long>(n), outs_h.end());
  }

  // The body's joint graph, its inputs reordered for the reverse Scan:
  //   states (d states' for the float states, the implicit gradients' sums), scan inputs (history,
  //   slices, scan-output gradients), implicit values -> (d states, the sums, d slices).
  std::shared_ptr<Graph> g = clone_graph(body);
  for (size_t i = 0; i < n + m + imp; ++i) {
    const Value* outside = node.input(static_cast<int>(i));
    Value* v = g->mutable_inputs()[i];
    v->dtype = outside->dtype;
    v->shape = i >= n && i < n + m ? slice_shape(outside->shape, s.input_axes[i - n]) : outside->shape;
  }
  g->set_opset(std::string(kTrainrtDomain), 1);
  std::vector<Value*> body_in(g->inputs().begin(), g->inputs().end());
  GradientRequest request;
  for (size_t i : float_states) request.outputs_with_grad.push_back(g->outputs()[i]->name);
  for (size_t j : graded_scans) request.outputs_with_grad.push_back(g->outputs()[n + j]->name);
  for (size_t i : float_states) request.wrt.push_back(body_in[i]->name);
  for (size_t i : wanted_inputs) request.wrt.push_back(body_in[n + i]->name);
  for (size_t i : wanted_implicit) request.wrt.push_back(body_in[n + m + i]->name);
  with_error_context(fmt(node.describe(), ": differentiating its body"), [&] {
    infer_graph_shapes(*g);
    const GradientResult result = build_gradients(*g, request);
    std::vector<Value*> grads;
    for (const std::string& name : request.wrt) grads.push_back(g->find_value(result.grad_of.at(name)));
    // Fed gradients: after the body's inputs, in outputs_with_grad order.
    std::vector<Value*> fed(g->inputs().begin() + static_cast<long>(n + m + imp), g->inputs().end());
    std::vector<Value*> ordered(fed.begin(), fed.begin() + static_cast<long>(float_states.size()));
    std::vector<Value*> outs(grads.begin(), grads.begin() + static_cast<long>(float_states.size()));
    const size_t first_implicit_grad = float_states.size() + wanted_inputs.size();
    for (size_t w = 0; w < wanted_implicit.size(); ++w) {
      Value* step = grads[first_implicit_grad + w];
      Value* sum = g->add_input(g->unique_name(step->name + "_sum"), step->dtype, step->shape);
      ordered.push_back(sum);
      Node* add = g->add_node("Add", {sum, step}, {g->unique_name(step->name + "_summed")});
      outs.push_back(add->output(0));
    }
    for (size_t i = 0; i < n + m; ++i) ordered.push_back(body_in[i]);
    ordered.insert(ordered.end(), fed.begin() + static_cast<long>(float_states.size()), fed.end());
    for (size_t i = 0; i < imp; ++i) ordered.push_back(body_in[n + m + i]);
    for (size_t w = 0; w < wanted_inputs.size(); ++w) outs.push_back(grads[float_states.size() + w]);
    g->mutable_inputs() = std::move(ordered);
    g->mutable_outputs() = std::move(outs);
  });
  remove_unread_nodes(*g);

  std::vector<Value*> rev_inputs;
  for (size_t i : float_states)
    rev_inputs.push_back(ctx.output_grad(static_cast<int>(i)) ? ctx.output_grad(static_cast<int>(i))
                                                                : zeros_like(ctx, node.input(static_cast<int>(i))));
  for (size_t i : wanted_implicit) rev_inputs.push_back(zeros_like(ctx, node.input(static_cast<int>(n + m + i))));
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
  for (size_t i = 0; i < n; ++i) {  // the history, read last step first
    rev_inputs.push_back(history[i]);
    in_axes.push_back(0);
    in_dirs.push_back(1);
  }
  for (size_t i = 0; i < m; ++i) {
    rev_inputs.push_back(node.input(static_cast<int>(n + i)));
    in_axes.push_back(s.input_axes[i]);
    in_dirs.push_back(s.input_reverse[i] ? 0 : 1);
  }
  for (size_t j : graded_scans) {
    rev_inputs.push_back(ctx.output_grad(static_cast<int>(n + j)));
    in_axes.push_back(s.output_axes[j]);
    in_dirs.push_back(s.output_reverse[j] ? 0 : 1);
  }
  for (size_t i = 0; i < imp; ++i) rev_inputs.push_back(node.input(static_cast<int>(n + m + i)));
  for (size_t i : wanted_inputs) {  // each slice's gradient where its slice was
    out_axes.push_back(s.input_axes[i]);
    out_dirs.push_back(s.input_reverse[i] ? 0 : 1);
  }
  std::map<std::string, Attribute> attrs{
      {"body", graph_attr(g)},
      {"num_scan_inputs", Attribute::of_int(static_cast<int64_t>(n + m + graded_scans.size()))},
      {"scan_input_axes", ints_attr(in_axes)}, {"scan_input_directions", ints_attr(in_dirs)},
      {"scan_output_axes", ints_attr(out_axes)}, {"scan_output_directions", ints_attr(out_dirs)}};
  if (imp) attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(imp));
  const size_t num_out = float_states.size() + wanted_implicit.size() + wanted_inputs.size();
  const std::vector<Value*> grads = ctx.emit_multi("Scan", rev_inputs, static_cast<int>(num_out), attrs);
  size_t o = 0;
  for (size_t i : float_states) {
    if (ctx.needs_input_grad(static_cast<int>(i))) ctx.set_input_grad(static_cast<int>(i), grads[o]);
    ++o;
  }
  for (size_t i : wanted_implicit) ctx.set_input_grad(static_cast<int>(n + m + i), grads[o++]);
  for (size_t i : wanted_inputs) ctx.set_input_grad(static_cast<int>(n + i), grads[o++]);
}

// Loop's gradient, in two Loops:
//   history: the forward Loop again, its body giving each iteration's number and incoming
//            loop-carried values as scan outputs (T iterations: the history's length);
//   reverse: a Loop of T iterations over the body's joint graph, iteration k differentiating the
//            forward's iteration t = T-1-k: it reads the carried values and the scan outputs'
//            gradients of step t from the histories (Gather), carries the carried values' gradients
//            (from d v_final, or zeros) and sums the enclosing values'.
// The condition is not differentiable; a body that ran saw it true, and the reverse body is fed so.
void loop_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  const LoopSignature s = loop_signature(node);
  const size_t n = s.carried, k = s.scan_outputs, imp = s.implicit;
  std::vector<size_t> float_states, graded_scans, wanted_implicit;
  for (size_t i = 0; i < n; ++i)
    if (is_float(node.input(static_cast<int>(2 + i))->dtype)) float_states.push_back(i);
  for (size_t j = 0; j < k; ++j)
    if (ctx.output_grad(static_cast<int>(n + j))) graded_scans.push_back(j);
  for (size_t i = 0; i < imp; ++i)
    if (ctx.needs_input_grad(static_cast<int>(2 + n + i))) wanted_implicit.push_back(i);
  bool wanted_state = false;
  for (size_t i : float_states) wanted_state = wanted_state || ctx.needs_input_grad(static_cast<int>(2 + i));
  if (!wanted_state && wanted_implicit.empty()) return;
  const Graph& body = body_of(node, "body");
  const std::vector<Value*> inputs(node.inputs().begin(), node.inputs().end());

  // The history: body(i, c, v, implicit) -> (c', v', i, v).
  std::shared_ptr<Graph> h = clone_graph(body);
  std::vector<Value*> h_outs(h->outputs().begin(), h->outputs().begin() + static_cast<long>(1 + n));
  for (size_t i = 0; i < n + 2; ++i)
    if (i != 1) h_outs.push_back(h->inputs()[i]);  // the iteration number, then each carried value
  h->mutable_outputs() = std::move(h_outs);
  remove_unread_nodes(*h);
  std::vector<bool> keep(2 * n + 1, true);
  std::fill(keep.begin(), keep.begin() + static_cast<long>(n), false);
  std::map<std::string, Attribute> h_attrs{{"body", graph_attr(h)}};
  if (imp) h_attrs[std::string(kImplicitInputsAttr)] = Attribute::of_int(static_cast<int64_t>(imp));
  const std::vector<Value*> h_outputs = ctx.emit_multi("Loop", inputs, static_cast<int>(2 * n + 1), h_attrs,
                                                       kOnnxDomain, keep);
  Value* iterations = h_outputs[n];  // (T)
  const std::vector<Value*> history(h_outputs.begin() + static_cast<long>(n + 1), h_outputs.end());
  Value* trips = ctx.emit("Reshape", {ctx.shape_of(iterations), ctx.const_i64({})});  // T, a scalar
  Value* last = ctx.emit("Sub", {trips, ctx.scalar_like(trips, 1)});                  // T - 1

  // The body's joint graph, its iteration number, condition, carried values and scan-output
  // gradients made inside from the reverse Loop's inputs.
  std::shared_ptr<Graph> g = clone_graph(body);
  for (size_t i = 0; i < 2 + n + imp; ++i) {
    Value* v = g->mutable_inputs()[i];
    if (i < 2) continue;  // i64 and bool scalars as declared
    v->dtype = node.input(static_cast<int>(i))->dtype;
    v->shape = node.input(static_cast<int>(i))->shape;
  }
  g->mutable_inputs()[0]->dtype = DType::kI64;
  g->mutable_inputs()[0]->shape = Shape(std::vector<Dim>{});
  g->mutable_inputs()[1]->dtype = DType::kBool;
  g->mutable_inputs()[1]->shape = Shape(std::vector<Dim>{});
  g->set_opset(std::string(kTrainrtDomain), 1);
  const std::vector<Value*> body_in(g->inputs().begin(), g->inputs().end());
  GradientRequest request;
  for (size_t i : float_states) request.outputs_with_grad.push_back(g->outputs()[1 + i]->name);
  for (size_t j : graded_scans) request.outputs_with_grad.push_back(g->outputs()[1 + n + j]->name);
  for (size_t i : float_states) request.wrt.push_back(body_in[2 + i]->name);
  for (size_t i : wanted_implicit) request.wrt.push_back(body_in[2 + n + i]->name);
  with_error_context(fmt(node.describe(), ": differentiating its body"), [&] {
    infer_graph_shapes(*g);
    const GradientResult result = build_gradients(*g, request);
    std::vector<Value*> grads;
    for (const std::string& name : request.wrt) grads.push_back(g->find_value(result.grad_of.at(name)));
    const std::vector<Value*> fed(g->inputs().begin() + static_cast<long>(2 + n + imp), g->inputs().end());
    // The reverse Loop's inputs: k, its condition, the carried gradients and sums, then the
    // enclosing values, the histories, the scan outputs' gradients and T - 1.
    auto scalar_input = [&](const char* name, DType dtype) {
      return g->add_input(g->unique_name(name), dtype, Shape(std::vector<Dim>{}));
    };
    Value* k_in = scalar_input("reverse_iteration", DType::kI64);
    Value* cond_in = scalar_input("reverse_condition", DType::kBool);
    std::vector<Value*> ordered = {k_in, cond_in};
    std::vector<Value*> outs;
    Node* cond_out = g->add_node("Identity", {cond_in}, {g->unique_name("reverse_condition_out")});
    outs.push_back(cond_out->output(0));
    for (size_t f = 0; f < float_states.size(); ++f) {
      ordered.push_back(fed[f]);  // d v' of the float carried values
      outs.push_back(grads[f]);
    }
    for (size_t w = 0; w < wanted_implicit.size(); ++w) {
      Value* step = grads[float_states.size() + w];
      Value* sum = g->add_input(g->unique_name(step->name + "_sum"), step->dtype, step->shape);
      ordered.push_back(sum);
      outs.push_back(g->add_node("Add", {sum, step}, {g->unique_name(step->name + "_summed")})->output(0));
    }
    for (size_t i = 0; i < imp; ++i) ordered.push_back(body_in[2 + n + i]);
    Value* last_in = g->add_input(g->unique_name("last_iteration"), DType::kI64, Shape(std::vector<Dim>{}));
    // t = (T - 1) - k: the forward iteration this one differentiates.
    g->add_node_with_outputs("Sub", {last_in, k_in}, {body_in[0]});
    g->add_node_with_outputs("Identity", {cond_in}, {body_in[1]});
    auto step_of = [&](Value* stacked_hint, Value* into) {  // into = stacked[t]
      Value* stacked = g->add_input(g->unique_name(stacked_hint->name + "_history"), into->dtype, Shape::unknown_rank());
      ordered.push_back(stacked);
      Node* gather = g->add_node_with_outputs("Gather", {stacked, body_in[0]}, {into});
      gather->set_attr("axis", Attribute::of_int(0));
    };
    for (size_t i = 0; i < n; ++i) step_of(body_in[2 + i], body_in[2 + i]);
    for (size_t j = 0; j < graded_scans.size(); ++j) step_of(fed[float_states.size() + j], fed[float_states.size() + j]);
    ordered.push_back(last_in);
    g->mutable_inputs() = std::move(ordered);
    g->mutable_outputs() = std::move(outs);
  });
  remove_unread_nodes(*g);

  std::vector<Value*> rev_inputs = {trips, nullptr};
  for (size_t i : float_states)
    rev_inputs.push_back(ctx.output_grad(static_cast<int>(i)) ? ctx.output_grad(static_cast<int>(i))
                                                                : zeros_like(ctx, node.input(static_cast<int>(2 + i))));
  for (size_t i : wanted_implicit) rev_inputs.push_back(zeros_like(ctx, node.input(static_cast<int>(2 + n + i))));
  for (size_t i = 0; i < imp; ++i) rev_inputs.push_back(node.input(static_cast<int>(2 + n + i)));
  for (Value* v : history) rev_inputs.push_back(v);
  for (size_t j : graded_scans) rev_inputs.push_back(ctx.output_grad(static_cast<int>(n + j)));
  rev_inputs.push_back(last);
  std::map<std::string, Attribute> attrs{
      {"body", graph_attr(g)},
      {std::string(kImplicitInputsAttr), Attribute::of_int(static_cast<int64_t>(imp + n + graded_scans.size() + 1))}};
  const size_t num_out = float_states.size() + wanted_implicit.size();
  const std::vector<Value*> grads = ctx.emit_multi("Loop", rev_inputs, static_cast<int>(num_out), attrs);
  size_t o = 0;
  for (size_t i : float_states) {
    if (ctx.needs_input_grad(static_cast<int>(2 + i))) ctx.set_input_grad(static_cast<int>(2 + i), grads[o]);
    ++o;
  }
  for (size_t i : wanted_implicit) ctx.set_input_grad(static_cast<int>(2 + n + i), grads[o++]);
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
  r.add(kOnnxDomain, "Scan", scan_grad);
  r.add(kOnnxDomain, "Loop", loop_grad);
}

}  // namespace trainrt
