#include "trainrt/passes/label_sparsity.h"

#include <algorithm>
#include <set>

#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/valid_rows.h"
#include "trainrt/passes/graph_edit.h"
#include "trainrt/passes/zero_input_elimination.h"

namespace trainrt {
namespace {

// The name LabelSparsity gives the ValidRows output, after the labels' name: a backward program
// gets that value as an input (a saved value), by this name.
constexpr std::string_view kValidRowsSuffix = "/valid_rows";

bool ranked(const Value* v, int min_rank) { return v && v->shape.rank_known && v->shape.rank() >= min_rank; }

bool is_onnx(const Node& n, std::string_view op) { return n.domain() == kOnnxDomain && n.op_type() == op; }
bool is_ours(const Node& n, std::string_view op) { return n.domain() == kTrainrtDomain && n.op_type() == op; }

// The last axis, given as -1 or rank - 1.
bool is_last_axis(const Node& n, const Value* v, int64_t fallback) {
  const int64_t axis = n.attr_int("axis", fallback);
  return axis == -1 || axis == static_cast<int64_t>(v->shape.rank()) - 1;
}

// An operand that is the same for every row of `v`: a scalar, or ones but for the last dim.
bool per_feature(const Value* o, const Value* v) {
  if (!o || !o->shape.rank_known || o->shape.rank() > v->shape.rank()) return false;
  for (size_t d = 0; d + 1 < o->shape.rank(); ++d)
    if (!(o->shape.dims[d] == Dim(1))) return false;
  return true;
}

// Reshape-like ops whose input rows (all dims but the last) map one to one on the output's.
bool is_row_view(const Node& p) {
  static const std::set<std::string_view> views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  if (p.domain() != kOnnxDomain || !views.count(p.op_type())) return false;
  const Value *in = p.input(0), *out = p.output(0);
  return ranked(in, 2) && ranked(out, 2) && in->shape.dims.back() == out->shape.dims.back();
}

// The input of `p` whose rows give its output's rows one to one (a row-wise op), or -1.
int row_input(const Node& p) {
  static const std::set<std::string_view> unary = {"Relu", "Gelu", "Tanh", "Sigmoid", "Cast", "Neg", "Exp",
                                                   "Log", "Abs", "Sqrt", "Erf", "Softplus", "LeakyRelu", "Elu",
                                                   "HardSigmoid", "HardSwish", "Reciprocal", "FastGelu"};
  const Value* out = p.output(0);
  if (!ranked(out, 2)) return -1;
  for (int o = 1; o < p.num_outputs(); ++o)
    if (p.output(o) && !p.output(o)->uses.empty()) return -1;
  const std::string& op = p.op_type();
  if (unary.count(op) && p.num_inputs() == 1) return 0;
  if ((is_onnx(p, "Softmax") || is_onnx(p, "LogSoftmax")) && is_last_axis(p, out, -1)) return 0;
  if (is_onnx(p, "LayerNormalization") && is_last_axis(p, out, -1) && per_feature(p.input(1), out) &&
      (!p.input(2) || per_feature(p.input(2), out)))
    return 0;
  if (p.domain() == kOnnxDomain && (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && p.num_inputs() == 2) {
    for (int i = 0; i < 2; ++i)
      if (p.input(i)->shape.known_equal(out->shape) && per_feature(p.input(1 - i), out)) return i;
    return -1;
  }
  const bool product = is_ours(p, "FusedMatMul") || is_onnx(p, "MatMul") || is_onnx(p, "Gemm");
  if (product && p.attr_int("transA", 0) == 0 && ranked(p.input(0), 2) && ranked(p.input(1), 2) &&
      p.input(1)->shape.rank() == 2 && (!p.input(2) || per_feature(p.input(2), out)))
    return 0;
  return -1;
}

struct Step {
  Node* node;
  int row_input;  // -1: a row view, absorbed into the flatten before the gather
};

bool sparsify(Graph& g, Node& loss) {
  const std::string reduction = loss.attr_string("reduction", "mean");
  if (!loss.has_attr("ignore_index") || (reduction != "mean" && reduction != "sum")) return false;
  Value *scores = loss.input(0), *labels = loss.input(1);
  if (!ranked(scores, 2) || scores->shape.rank() != 2 || !ranked(labels, 1) || labels->shape.rank() != 1) return false;
  // Already sparse: labels = Gather(l, ValidRows(l)). (Padding elimination's Gather(l, ValidRows(keep))
  // gathers the kept tokens' labels, which still hold ignored ones.)
  if (const Node* gather = labels->producer; gather && is_onnx(*gather, "Gather") && gather->input(1) &&
                                             gather->input(1)->producer &&
                                             is_ours(*gather->input(1)->producer, "ValidRows") &&
                                             gather->input(1)->producer->input(0) == gather->input(0))
    return false;
  for (int o = 1; o < loss.num_outputs(); ++o)
    if (loss.output(o) && !loss.output(o)->uses.empty()) return false;
  // The gather's gradient (GatherGrad) takes the float types: a bf16 head (autocast) runs on the R rows too.
  const auto gatherable = [](const Value* v) { return is_floating(v->dtype); };
  if (!gatherable(scores)) return false;
  // Up from the scores while each value is read by the step below it alone.
  std::vector<Step> steps;
  Value* top = scores;
  while (top->producer && top->uses.size() == 1 && !is_graph_output(g, top)) {
    Node* p = top->producer;
    if (top->producer_output != 0) break;
    if (is_row_view(*p) && gatherable(p->input(0))) {
      steps.push_back({p, -1});
      top = p->input(0);
      continue;
    }
    const int i = row_input(*p);
    if (i < 0 || !gatherable(p->input(i))) break;
    steps.push_back({p, i});
    top = p->input(i);
  }
  Value* flat = top;
  if (top->shape.rank() != 2)
    flat = add_op(g, "Flatten", {top}, top->name + "/rows_flat", kOnnxDomain,
                  {{"axis", Attribute::of_int(static_cast<int64_t>(top->shape.rank()) - 1)}});
  Value* rows = add_op(g, "ValidRows", {labels}, labels->name + std::string(kValidRowsSuffix), kTrainrtDomain,
                       {{"ignore_index", Attribute::of_int(loss.attr_int("ignore_index", -100))},
                        {"multiple", Attribute::of_int(kValidRowsMultiple)}});
  Value* x = add_op(g, "Gather", {flat, rows}, flat->name + "/valid", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
  std::vector<Node*> bypassed;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    bypassed.push_back(it->node);
    if (it->row_input < 0) continue;
    std::vector<Value*> inputs = it->node->inputs();
    inputs[static_cast<size_t>(it->row_input)] = x;
    x = add_like(g, *it->node, inputs, "/valid")->output(0);
  }
  Value* kept_labels = add_op(g, "Gather", {labels, rows}, labels->name + "/valid", kOnnxDomain,
                              {{"axis", Attribute::of_int(0)}});
  loss.replace_input(0, x);
  loss.replace_input(1, kept_labels);
  if (scores->producer && std::find(bypassed.begin(), bypassed.end(), scores->producer) == bypassed.end())
    bypassed.push_back(scores->producer);
  remove_unread(g, bypassed);
  return true;
}

}  // namespace

bool LabelSparsity::apply_impl(Graph& graph) const {
  std::vector<Node*> losses;
  for (Node* n : graph.topological_order())
    if (is_onnx(*n, "SoftmaxCrossEntropyLoss") || is_onnx(*n, "NegativeLogLikelihoodLoss")) losses.push_back(n);
  bool changed = false;
  for (Node* loss : losses) changed = sparsify(graph, *loss) || changed;
  return changed;
}

bool is_valid_rows(const Value* rows) {
  if (!rows) return false;
  if (rows->producer) return is_ours(*rows->producer, "ValidRows");
  const std::string& name = rows->name;  // a forward input or saved value once hoisted or partitioned
  return name.size() > kValidRowsSuffix.size() && name.ends_with(kValidRowsSuffix);
}

// ---- RowScatterPushdown ----
namespace {

// dims [begin, end) of the i64 shape tensor `shape`.
Value* shape_slice(Graph& g, Value* shape, int64_t begin, int64_t end, const std::string& base) {
  return add_op(g, "Slice", {shape, i64_constant(g, base + "/begin", {begin}), i64_constant(g, base + "/end", {end})},
                base);
}

enum class Pushed { kNo, kInPlace, kReplaced };  // kReplaced: the reader removed, its nodes appended

Pushed push_into_at(Graph& g, Node& reader, int at, Node& scatter, Node* view);

// Rewrites one reader of the scatter `s` = GatherGrad(shape, rows, dv), read directly or through
// `view` (a Reshape of s, or null), in the reader's place. Returns true when it no longer reads s.
bool push_into(Graph& g, Node& reader, int at, Node& scatter, Node* view) {
  const std::vector<Node*> order = g.nodes();
  const auto it = std::find(order.begin(), order.end(), &reader);
  Node* anchor = it != order.end() && it + 1 != order.end() ? *(it + 1) : nullptr;
  const Pushed pushed = push_into_at(g, reader, at, scatter, view);
  if (pushed == Pushed::kReplaced) place_before(g, order.size() - 1, anchor);
  return pushed != Pushed::kNo;
}

Pushed push_into_at(Graph& g, Node& reader, int at, Node& scatter, Node* view) {
  Value *shape = scatter.input(0), *rows = scatter.input(1), *dv = scatter.input(2);
  const std::string base = reader.output(0)->name + "/valid";
  Value* out = reader.output(0);
  const bool product = is_ours(reader, "FusedMatMul") || is_onnx(reader, "Gemm");
  // dX = s W: the product of the R rows, scattered; back to the view's leading dims.
  if (product && at == 0 && reader.attr_int("transA", 0) == 0 && !reader.input(2) && ranked(reader.input(1), 2) &&
      reader.input(1)->shape.rank() == 2) {
    std::vector<Value*> inputs = reader.inputs();
    inputs[0] = dv;
    Value* y = add_like(g, reader, inputs, "/valid")->output(0);
    Value* y_shape = add_op(g, "Shape", {y}, base + "/shape");
    Value* full = add_op(g, "Concat", {shape_slice(g, shape, 0, 1, base + "/n"), shape_slice(g, y_shape, 1, 2, base + "/k")},
                         base + "/full_shape", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
    Value* z = add_op(g, "GatherGrad", {full, rows, y}, base + "/scatter", kTrainrtDomain,
                      {{"axis", Attribute::of_int(0)}});
    if (view) {
      Value* lead = shape_slice(g, view->input(1), 0, -1, base + "/lead");
      Value* dims = add_op(g, "Concat", {lead, shape_slice(g, y_shape, 1, 2, base + "/k2")}, base + "/out_shape",
                           kOnnxDomain, {{"axis", Attribute::of_int(0)}});
      z = add_op(g, "Reshape", {z, dims}, base + "/reshaped");
    }
    const std::vector<Use> uses = out->uses;
    if (is_graph_output(g, out)) {
      g.remove_node(&reader);
      become(g, z, out);
    } else {
      for (const Use& u : uses) u.node->replace_input(u.input_index, z);
      g.remove_node(&reader);
    }
    return Pushed::kReplaced;
  }
  // dW = s^T H (or H^T s): both row-contracted; the other operand's R rows.
  const bool contracts_rows = product && ranked(reader.input(0), 2) && reader.input(0)->shape.rank() == 2 &&
                              ranked(reader.input(1), 2) && reader.input(1)->shape.rank() == 2 &&
                              reader.attr_int("transA", 0) == 1 && reader.attr_int("transB", 0) == 0 &&
                              !reader.input(2) && !view;
  if (contracts_rows) {
    std::vector<Value*> inputs = reader.inputs();
    inputs[static_cast<size_t>(at)] = dv;
    inputs[static_cast<size_t>(1 - at)] = add_op(g, "Gather", {inputs[static_cast<size_t>(1 - at)], rows},
                                                 base + "/other_rows", kOnnxDomain, {{"axis", Attribute::of_int(0)}});
    Node* n = g.add_node(reader.op_type(), inputs, {g.unique_name(base)}, reader.domain());
    for (const auto& [key, value] : reader.attrs()) n->set_attr(key, value);
    const std::vector<Use> uses = out->uses;
    const bool output = is_graph_output(g, out);
    g.remove_node(&reader);
    infer_and_store(*n);
    if (output) become(g, n->output(0), out);
    else for (const Use& u : uses) u.node->replace_input(u.input_index, n->output(0));
    return Pushed::kReplaced;
  }
  // A sum over all rows: the scattered zeros add nothing.
  if (is_ours(reader, "ReduceSumToShape") && at == 0 && ranked(reader.input(1), 1) &&
      reader.input(1)->shape.dims[0] == Dim(1)) {
    reader.replace_input(0, dv);
    return Pushed::kInPlace;
  }
  return Pushed::kNo;
}

void collect_readers(const Graph& g, Value* v, Node* view, std::vector<std::tuple<Node*, int, Node*>>& readers,
                     std::vector<Node*>& views) {
  for (const Use& u : v->uses) {
    Node* n = u.node;
    const bool row_view = (is_onnx(*n, "Reshape") || is_onnx(*n, "Flatten")) && u.input_index == 0 &&
                          is_row_view(*n) && !is_graph_output(g, n->output(0));
    if (row_view && n->output(0)->shape.rank() == 2) {
      views.push_back(n);
      collect_readers(g, n->output(0), nullptr, readers, views);
    } else if (row_view && !view && is_onnx(*n, "Reshape")) {
      views.push_back(n);
      collect_readers(g, n->output(0), n, readers, views);
    } else {
      readers.emplace_back(n, u.input_index, view);
    }
  }
}

bool is_row_scatter(const Node& n) {
  return is_ours(n, "GatherGrad") && !n.input(3) && n.attr_int("axis", 0) == 0 && is_valid_rows(n.input(1)) &&
         ranked(n.input(2), 2) && n.input(2)->shape.rank() == 2;
}

// Cast(scatter(dv)) = scatter(Cast(dv)), exactly: the scattered zeros cast to zeros. Under autocast
// the head's gradient reaches the layer below's bf16 products through a Cast of the f32 scatter (read
// directly or through a row view); this casts the R rows instead and scatters them again, so that
// the products can be pushed onto the rows below. Returns whether it rewrote a Cast.
bool cast_rows_before_scatter(Graph& g, Node& scatter) {
  struct Found {
    Node* cast;
    Node* view;  // the row view the Cast reads, or null
  };
  std::vector<Found> casts;
  const auto is_float_cast = [](const Node& n) {
    return is_onnx(n, "Cast") && n.output(0) && is_floating(n.output(0)->dtype) && is_floating(n.input(0)->dtype);
  };
  for (const Use& u : scatter.output(0)->uses) {
    Node* n = u.node;
    if (is_float_cast(*n)) {
      casts.push_back({n, nullptr});
    } else if ((is_onnx(*n, "Reshape") || is_onnx(*n, "Flatten")) && u.input_index == 0 && is_row_view(*n) &&
               !is_graph_output(g, n->output(0))) {
      for (const Use& v : n->output(0)->uses)
        if (is_float_cast(*v.node)) casts.push_back({v.node, n});
    }
  }
  for (const auto& [cast, view] : casts) {
    const std::vector<Node*> order = g.nodes();
    const auto after = std::find(order.begin(), order.end(), cast) + 1;
    const Node* anchor = after != order.end() ? *after : nullptr;
    const size_t first = static_cast<size_t>(g.num_nodes());
    const std::string base = cast->output(0)->name + "/rows";
    Value* rows_cast = add_like(g, *cast, {scatter.input(2)}, "/rows")->output(0);
    Value* out = add_op(g, "GatherGrad", {scatter.input(0), scatter.input(1), rows_cast}, base + "/scatter",
                        kTrainrtDomain, {{"axis", Attribute::of_int(0)}});
    out->shape = scatter.output(0)->shape;  // inference sees a runtime shape tensor; the dims are known
    if (view) {
      std::vector<Value*> inputs = view->inputs();
      inputs[0] = out;
      out = add_like(g, *view, inputs, "/rows")->output(0);
      out->shape = view->output(0)->shape;
    }
    Value* y = cast->output(0);
    const std::vector<Use> uses = y->uses;
    const bool output = is_graph_output(g, y);
    g.remove_node(cast);
    if (output) become(g, out, y);
    else for (const Use& u : uses) u.node->replace_input(u.input_index, out);
    place_before(g, first, anchor);
  }
  std::vector<Node*> touched;
  for (const auto& [cast, view] : casts)
    if (view) touched.push_back(view);
  touched.push_back(&scatter);
  remove_unread(g, touched);
  return !casts.empty();
}

}  // namespace

bool RowScatterPushdown::apply_impl(Graph& graph) const {
  bool changed = false;
  std::vector<Node*> cast_readers;
  for (Node* n : graph.topological_order())
    if (is_row_scatter(*n)) cast_readers.push_back(n);
  for (Node* s : cast_readers) changed = cast_rows_before_scatter(graph, *s) || changed;
  std::vector<Node*> scatters;
  for (Node* n : graph.topological_order())
    if (is_row_scatter(*n)) scatters.push_back(n);
  for (Node* s : scatters) {
    Value* full = s->output(0);
    if (is_graph_output(graph, full)) continue;
    std::vector<Node*> touched = {s};
    // (reader, input index, view): the readers of s and of its row views; view is the Reshape to
    // more than two dims they read through, null where they read (N, C) rows.
    std::vector<std::tuple<Node*, int, Node*>> readers;
    collect_readers(graph, full, nullptr, readers, touched);
    for (auto& [reader, at, view] : readers) changed = push_into(graph, *reader, at, *s, view) || changed;
    remove_unread(graph, touched);
  }
  return changed;
}

}  // namespace trainrt
