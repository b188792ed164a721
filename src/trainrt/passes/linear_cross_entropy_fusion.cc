#include "trainrt/passes/linear_cross_entropy_fusion.h"

#include <algorithm>
#include <optional>

#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/graph_edit.h"

namespace trainrt {
namespace {

bool is_matrix(const Value* v, DType dtype) {
  return v && v->dtype == dtype && v->shape.rank_known && v->shape.rank() == 2;
}

// op(A) op(B) (+ bias) on f32 or bf16 matrices (all one type), as MatMul, FusedMatMul or Gemm
// compute it with alpha 1.
struct Product {
  Value* a = nullptr;
  Value* b = nullptr;
  Value* bias = nullptr;
  bool trans_a = false, trans_b = false;
};

std::optional<Product> product_of(const Node& n) {
  if (n.num_outputs() != 1 || !n.output(0)) return std::nullopt;
  const DType dtype = n.output(0)->dtype;
  if ((dtype != DType::kF32 && dtype != DType::kBF16) || !is_matrix(n.output(0), dtype)) return std::nullopt;
  Product p{n.input(0), n.input(1)};
  if (n.op_type() == "MatMul" && n.domain() == kOnnxDomain) {
    if (n.num_inputs() != 2) return std::nullopt;
  } else if (n.op_type() == "FusedMatMul") {
    for (const auto& [key, value] : n.attrs())
      if (key != "alpha" && key != "transA" && key != "transB") return std::nullopt;  // batch transposes
    if (n.attr_float("alpha", 1.f) != 1.f) return std::nullopt;
    p.bias = n.input(2);
  } else if (n.op_type() == "Gemm" && n.domain() == kOnnxDomain) {
    if (n.attr_float("alpha", 1.f) != 1.f || (n.input(2) && n.attr_float("beta", 1.f) != 1.f)) return std::nullopt;
    p.bias = n.input(2);
  } else {
    return std::nullopt;
  }
  p.trans_a = n.attr_int("transA", 0) != 0;
  p.trans_b = n.attr_int("transB", 0) != 0;
  if (!is_matrix(p.a, dtype) || !is_matrix(p.b, dtype)) return std::nullopt;
  return p;
}

// Whether `v`'s only reader is input `index` of `reader`, and v is no graph output.
bool read_only_by(const Graph& g, const Value* v, const Node* reader, int index) {
  return v->uses.size() == 1 && v->uses[0].node == reader && v->uses[0].input_index == index && !is_graph_output(g, v);
}

// The Cast node that is `v`'s only reader, casting it to `to`, or null.
Node* only_cast_to(const Graph& g, const Value* v, DType to) {
  if (v->uses.size() != 1 || is_graph_output(g, v)) return nullptr;
  Node* c = v->uses[0].node;
  const bool casts = c->op_type() == "Cast" && c->domain() == kOnnxDomain && c->output(0) && c->output(0)->dtype == to;
  return casts ? c : nullptr;
}

bool is_constant_one(const Value* v) {
  return v && v->is_initializer() && v->data.dtype() == DType::kF32 && v->data.numel() == 1 &&
         v->data.data<float>()[0] == 1.f;
}

// Whether `n` sums (N, C) dS over its rows into the bias's (C): ReduceSumToShape to the bias's
// shape (as the products' gradient rules emit it), or ReduceSum over axis 0.
bool sums_rows(const Node& n, const Value* ds, const Value* bias) {
  if (n.input(0) != ds || !n.output(0)) return false;
  if (n.op_type() == "ReduceSumToShape") {
    const Node* shape = n.input(1) ? n.input(1)->producer : nullptr;
    return shape && shape->op_type() == "Shape" && shape->input(0) == bias && shape->num_inputs() == 1 &&
           !shape->has_attr("start") && !shape->has_attr("end");
  }
  const Value* out = n.output(0);
  if (!out->shape.rank_known || out->shape.rank() != 1 || !(out->shape.dims[0] == ds->shape.dims[1])) return false;
  if (n.op_type() != "ReduceSum" || n.domain() != kOnnxDomain || n.attr_int("keepdims", 1) != 0) return false;
  const Value* axes = n.input(1);
  const std::vector<int64_t> listed =
      axes ? (axes->is_initializer() ? axes->data.to_i64_vector() : std::vector<int64_t>{99}) : n.attr_ints("axes", {});
  return listed == std::vector<int64_t>{0} || listed == std::vector<int64_t>{-2};
}

// The loss gradient `grad`'s pattern (the header's "before"), rewritten; false when it is not one.
bool fuse(Graph& g, Node* grad) {
  if (grad->num_inputs() != 3 || !is_constant_one(grad->input(0))) return false;
  Value* log_prob = grad->input(1);
  Value* labels = grad->input(2);
  Node* loss = log_prob->producer;
  if (!loss || loss->op_type() != "SoftmaxCrossEntropyLoss" || loss->domain() != kOnnxDomain ||
      loss->num_inputs() != 2 || loss->input(1) != labels || loss->output(1) != log_prob)
    return false;
  const std::string reduction = loss->attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum") return false;
  Value* scores = loss->input(0);
  if (!read_only_by(g, scores, loss, 0)) return false;
  // Under autocast the head is bf16 and cast to f32 for the loss; the loss gradient is cast back.
  Node* scores_cast = scores->producer && scores->producer->op_type() == "Cast" ? scores->producer : nullptr;
  Node* head = scores_cast ? scores_cast->input(0)->producer : scores->producer;
  const std::optional<Product> p = head ? product_of(*head) : std::nullopt;
  if (!p || p->trans_a) return false;
  const DType dtype = head->output(0)->dtype;  // of X, W, B and the gradients
  if (scores_cast ? (dtype != DType::kBF16 || !only_cast_to(g, head->output(0), DType::kF32)) : dtype != DType::kF32)
    return false;
  Value* x = p->a;
  Value* w = p->b;
  const bool trans_w = p->trans_b;
  Value* ds_f32 = grad->output(0);
  if (!ds_f32 || !read_only_by(g, log_prob, grad, 1) || is_graph_output(g, ds_f32) || !is_matrix(ds_f32, DType::kF32))
    return false;
  Node* ds_cast = dtype == DType::kF32 ? nullptr : only_cast_to(g, ds_f32, dtype);
  if (dtype != DType::kF32 && !ds_cast) return false;
  Value* ds = ds_cast ? ds_cast->output(0) : ds_f32;
  if (is_graph_output(g, ds)) return false;
  if (p->bias && !(p->bias->dtype == dtype && p->bias->shape.rank_known && p->bias->shape.rank() == 1))
    return false;
  // The bf16 kernel sums dW over its row blocks in an f32 copy of W in its workspace: W's dims static.
  if (dtype != DType::kF32 && !w->shape.is_static()) return false;
  // Each reader of dS: dX = dS W (W^T), dW = dS^T X (X^T dS), dB; each at most once.
  Node *dx = nullptr, *dw = nullptr, *db = nullptr;
  for (const Use& u : ds->uses) {
    Node* r = u.node;
    const std::optional<Product> q = product_of(*r);
    const bool is_dx = q && !q->bias && q->a == ds && q->b == w && !q->trans_a && q->trans_b == !trans_w;
    const bool is_dw = q && !q->bias && !q->trans_b &&
                       (trans_w ? (q->a == ds && q->b == x && q->trans_a) : (q->a == x && q->b == ds && q->trans_a));
    const bool is_db = !is_dx && !is_dw && p->bias && sums_rows(*r, ds, p->bias);
    if (!is_dx && !is_dw && !is_db) return false;
    Node*& slot = is_dx ? dx : is_dw ? dw : db;
    if (slot) return false;
    slot = r;
  }

  Value* loss_value = loss->output(0);
  std::vector<Value*> outputs = {loss_value, dx ? dx->output(0) : nullptr, dw ? dw->output(0) : nullptr,
                                 db ? db->output(0) : nullptr};
  // The block of scores the kernel works in, a buffer of the plan's (output 4, read by nothing).
  while (outputs.size() < 4) outputs.push_back(nullptr);
  outputs.push_back(g.add_value(g.unique_name(loss_value->name + "/scores_block")));
  std::vector<Node*> replaced = {head, loss, grad};
  for (Node* cast : {scores_cast, ds_cast})
    if (cast) replaced.push_back(cast);
  for (Node* r : {dx, dw, db})
    if (r) replaced.push_back(r);
  // The bias's Shape goes too when nothing else reads it.
  Node* bias_shape = db && db->op_type() == "ReduceSumToShape" ? db->input(1)->producer : nullptr;
  // The fused node goes where the last replaced node was (before the next node that stays).
  const std::vector<Node*> order = g.nodes();
  const auto goes = [&](const Node* n) {
    return n == bias_shape || std::find(replaced.begin(), replaced.end(), n) != replaced.end();
  };
  size_t last = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (goes(order[i])) last = i;
  const auto next = std::find_if(order.begin() + static_cast<std::ptrdiff_t>(last), order.end(),
                                 [&](const Node* n) { return !goes(n); });
  const Node* anchor = next == order.end() ? nullptr : *next;
  const std::string name = loss->name();
  const std::vector<std::pair<std::string, Attribute>> attrs = {{"trans_w", Attribute::of_int(trans_w)},
                                                                {"reduction", Attribute::of_string(reduction)}};
  const Attribute* ignore = loss->attr("ignore_index");
  const std::optional<Attribute> ignore_index = ignore ? std::optional<Attribute>(*ignore) : std::nullopt;
  for (Node* r : replaced) g.remove_node(r);
  if (bias_shape) remove_unread(g, {bias_shape});
  const size_t first = static_cast<size_t>(g.num_nodes());
  Node* fused = g.add_node_with_outputs("LinearSoftmaxCrossEntropy", {x, w, labels, p->bias}, outputs,
                                        kTrainrtDomain, name + "/linear");
  for (const auto& [key, value] : attrs) fused->set_attr(key, value);
  if (ignore_index) fused->set_attr("ignore_index", *ignore_index);
  infer_and_store(*fused);
  place_before(g, first, anchor);
  return true;
}

}  // namespace

bool LinearCrossEntropyFusion::apply_impl(Graph& graph) const {
  std::vector<Node*> grads;
  for (Node* n : graph.nodes())
    if (n->op_type() == "SoftmaxCrossEntropyLossGrad" && n->domain() == kTrainrtDomain) grads.push_back(n);
  bool changed = false;
  for (Node* grad : grads) changed |= fuse(graph, grad);
  return changed;
}

}  // namespace trainrt
