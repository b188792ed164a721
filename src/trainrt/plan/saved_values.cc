#include "trainrt/plan/saved_values.h"

#include <algorithm>
#include <unordered_set>

#include "trainrt/ops/op_schema.h"
#include "trainrt/plan/checkpoint_recompute.h"
#include "trainrt/plan/loss_gradient_in_forward.h"

namespace trainrt {
namespace {

class SavedValueChooser {
 public:
  SavedValueChooser(Graph& joint, GradientResult& gradients, const std::map<std::string, int>& recompute_regions,
                    const std::set<std::string>& kept)
      : joint_(joint), gradients_(gradients), recompute_regions_(recompute_regions), kept_(kept),
        forward_(gradients.forward_nodes.begin(), gradients.forward_nodes.end()),
        grad_inputs_(gradients.output_grad_inputs.begin(), gradients.output_grad_inputs.end()) {}

  SavedValueChoices choose() {
    for (Node* n : joint_.nodes()) {
      if (forward_.count(n) || n->domain() != kOnnxDomain) continue;
      if ((n->op_type() == "Shape" || n->op_type() == "Size") && is_forward_value(n->input(0))) move_to_forward(n);
    }
    // Rule 0 after rule 1: a Shape of a checkpointed value then reads it in the forward, not the backward.
    made_.checkpoint_recomputed = recompute_checkpoint_regions(joint_, gradients_, recompute_regions_, kept_);
    std::vector<Node*> log_softmaxes;  // collected first: keep_log_prob removes nodes
    for (Node* n : joint_.nodes())
      if (!forward_.count(n) && n->domain() == kOnnxDomain && n->op_type() == "LogSoftmax") log_softmaxes.push_back(n);
    for (Node* n : log_softmaxes)
      if (const Node* loss = loss_recomputed_by(*n)) keep_log_prob(loss, n);
    // Rule 7 after rule 2: the loss gradient's chain then reads log_prob, a forward value.
    made_.loss_gradients_in_forward = make_loss_gradients_in_forward(joint_, gradients_);
    forward_ = {gradients_.forward_nodes.begin(), gradients_.forward_nodes.end()};
    std::vector<Node*> pointwise;  // collected first: recompute adds nodes
    for (Node* n : joint_.nodes())
      if (forward_.count(n) && recomputing_pays(*n)) pointwise.push_back(n);
    for (Node* n : pointwise) recompute_in_backward(*n);
    std::vector<Node*> selections;  // row selections of free inputs, collected first likewise
    for (Node* n : joint_.nodes())
      if (forward_.count(n) && reselecting_rows_pays(*n)) selections.push_back(n);
    for (Node* n : selections) {
      place_recompute(*n, n->inputs());
      made_.row_selections_recomputed++;
    }
    std::vector<Node*> normalized;  // Relu nodes on a batch norm's output, collected first likewise
    for (Node* n : joint_.nodes())
      if (forward_.count(n) && recomputing_batch_norm_pays(*n)) normalized.push_back(n);
    for (Node* n : normalized) recompute_batch_norm_in_backward(*n);
    std::vector<Node*> pooled;  // Relu nodes feeding a MaxPool, collected first: the rewrite replaces nodes
    for (Node* n : joint_.nodes())
      if (forward_.count(n) && pooling_by_argmax_pays(*n)) pooled.push_back(n);
    for (Node* n : pooled) pool_by_argmax(*n);
    return made_;
  }

 private:
  bool is_forward_value(const Value* v) const {
    if (!v) return false;
    if (v->producer) return forward_.count(v->producer) > 0;
    return !grad_inputs_.count(v->name);  // a forward input or an initializer
  }

  bool is_graph_output(const Value* v) const {
    const auto& outputs = gradients_.forward_outputs;
    return std::find(outputs.begin(), outputs.end(), v->name) != outputs.end();
  }

  // One deterministic input, one output, a pass over memory: as cheap to run again as to read.
  static bool is_cheap_pointwise(const Node& n) {
    static const std::unordered_set<std::string> kOps = {"Gelu", "Relu", "LeakyRelu", "Sigmoid", "Tanh",
                                                         "Erf", "Neg", "Abs", "Cast"};
    return n.domain() == kOnnxDomain && kOps.count(n.op_type()) && n.num_inputs() == 1 && n.num_outputs() == 1 &&
           n.input(0) && n.output(0);
  }

  bool read_by_backward(const Value* v) const {
    return std::any_of(v->uses.begin(), v->uses.end(), [&](const Use& u) { return !forward_.count(u.node); });
  }

  // Whether `n`'s output is saved (the backward reads it; no graph output the caller holds anyway)
  // while its input reaches the backward at no cost in saved bytes: saved already, or a forward
  // input or initializer (kept by the caller), so running `n` again there saves the output's bytes.
  bool recomputing_pays(const Node& n) const {
    if (!is_cheap_pointwise(n) || is_graph_output(n.output(0)) || !read_by_backward(n.output(0))) return false;
    return reaches_backward_free(n.input(0)) || is_widening_cast(n);
  }

  // Rule 6: a row selection Gather(X, rows) (axis 0) of values the backward reads at no cost (the
  // caller's input X, label sparsity's rows: forward inputs) whose output the backward reads: the
  // backward selects again, so the selected copy is not saved. A copy costs one pass over the rows;
  // and where the rows are every row (ValidRows when no label is ignored), the selection is no copy
  // at all (the planner shows X itself, PlanOptions::row_selections).
  bool reselecting_rows_pays(const Node& n) const {
    if (n.domain() != kOnnxDomain || n.op_type() != "Gather" || n.attr_int("axis", 0) != 0 || n.num_inputs() != 2 ||
        n.num_outputs() != 1 || !n.output(0) || is_graph_output(n.output(0)) || !read_by_backward(n.output(0)))
      return false;
    return reaches_backward_free(n.input(0)) && reaches_backward_free(n.input(1));
  }

  // A Cast to a wider type of a forward value (bf16 -> f32 before a batch norm under autocast): exact,
  // so the backward can cast again, and saving the input costs fewer bytes than saving the output
  // even when the input was not saved before (a bf16 Conv output: half the f32 bytes).
  bool is_widening_cast(const Node& n) const {
    if (n.op_type() != "Cast" || !is_forward_value(n.input(0))) return false;
    const DType from = n.input(0)->dtype, to = n.output(0)->dtype;
    const bool exact = (from == DType::kBF16 || from == DType::kF16) && (to == DType::kF32 || to == DType::kF64);
    return exact || (from == DType::kF32 && to == DType::kF64);
  }

  // Whether the backward can read `x` at no cost in saved bytes: it is saved already, or it is a
  // forward input or initializer (kept by the caller).
  bool reaches_backward_free(const Value* x) const {
    if (!x) return false;
    if (!x->producer) return is_forward_value(x);
    return forward_.count(x->producer) && read_by_backward(x);
  }

  // Rule 4: Relu(BatchNormalization(X)) in training mode, X (N, C, ...) saved for the batch norm's
  // gradient, the Relu's output R saved too (a Conv's weight gradient and ReluGrad read it) and the
  // batch norm's output read by the Relu alone. The backward runs the batch norm (statistics from
  // X again: the same kernel on the same X, so the same bits) and the Relu on X, and only X is
  // saved: in a ResNet block this drops R (N, C, H, W) per BatchNorm + ReLU, for one batch-norm
  // pass (two reads of X, one write) in the backward. The batch norm's other inputs (scale, bias,
  // running statistics) are (C) vectors: the backward reads them from the caller's inputs, or they
  // are saved (the running variance torch's capture rescales in the forward), C values against
  // N * C * H * W. Its running-statistic outputs stay in the forward (training-mode Y does not
  // depend on the running statistics it reads).
  // Only when the forward reads R in Convs alone (BN -> ReLU -> Conv): a network's stem (Conv -> BN
  // -> ReLU -> MaxPool on the full-resolution image) has its largest activation there, and its
  // MaxPoolGrad holds R beside its own R-sized output, which on the CNN bench raised the backward
  // arena by R's 8 MiB, all it saved.
  bool recomputing_batch_norm_pays(const Node& relu) const {
    if (relu.domain() != kOnnxDomain || relu.op_type() != "Relu" || relu.num_inputs() != 1 || !relu.input(0) ||
        relu.num_outputs() != 1 || !relu.output(0) || is_graph_output(relu.output(0)) ||
        !read_by_backward(relu.output(0)))
      return false;
    for (const Use& u : relu.output(0)->uses)
      if (forward_.count(u.node) && u.node->op_type() != "Conv") return false;
    const Value* y = relu.input(0);
    const Node* bn = y->producer;
    if (!bn || !forward_.count(bn) || bn->domain() != kOnnxDomain || bn->op_type() != "BatchNormalization" ||
        bn->attr_int("training_mode", 0) == 0 || bn->output(0) != y || y->uses.size() != 1 || is_graph_output(y))
      return false;
    for (int i = 1; i < bn->num_inputs(); ++i)
      if (!is_forward_value(bn->input(i))) return false;
    return reaches_backward_free(bn->input(0));
  }

  // A copy of `n` in the backward, on the same input; every backward reader reads the copy instead.
  // The copy is ready as soon as the forward ends, and the schedule keeps insertion order among
  // ready nodes, so it goes just before the first reader that does work (through views such as
  // the Flatten a weight-gradient Gemm reads, which move along): its output then lives from there
  // to its last reader, not from the start of the backward.
  void recompute_in_backward(const Node& n) {
    place_recompute(n, n.input(0));
    made_.pointwise_recomputed++;
  }

  // Adds a copy of single-output `n` reading `input`, moves every backward reader of `n`'s output
  // to the copy and places the copy (and the views of it) before the first reader that does work.
  // Returns the copy.
  Node* place_recompute(const Node& n, Value* input) { return place_recompute(n, std::vector<Value*>{input}); }

  Node* place_recompute(const Node& n, const std::vector<Value*>& inputs) {
    Value* y = n.output(0);
    std::vector<Use> readers;
    for (const Use& u : y->uses)
      if (!forward_.count(u.node)) readers.push_back(u);
    Node* copy = joint_.add_node(n.op_type(), inputs, {joint_.unique_name(y->name + "/recompute")}, n.domain(),
                                 recompute_node_name(joint_, n.name()));
    for (const auto& [key, value] : n.attrs()) copy->set_attr(key, value);
    copy->output(0)->dtype = y->dtype;
    copy->output(0)->shape = y->shape;
    for (const Use& u : readers) u.node->replace_input(u.input_index, copy->output(0));
    std::vector<Node*> views;  // views of the copy, producers before readers
    std::unordered_set<const Node*> workers;
    collect_readers(copy->output(0), views, workers);
    const std::vector<Node*> order = joint_.nodes();
    auto first = std::find_if(order.begin(), order.end(), [&](const Node* m) { return workers.count(m) > 0; });
    if (first != order.end()) {
      joint_.move_before(copy, *first);
      for (Node* view : views) joint_.move_before(view, *first);
    }
    return copy;
  }

  // Rule 5: P = MaxPool(R), R = Relu(Y), where the forward reads R in the MaxPool alone and the
  // backward reads it in dY = ReluGrad(MaxPoolGrad(dP, R), R) alone, and P is saved anyway (the next
  // Conv's weight gradient reads it). ReLU and max pooling commute: the tap a window routes dP[o]
  // to holds R = P[o], so ReluGrad(dP, P) masks each dP[o] exactly as ReluGrad(., R) masks its tap,
  // and the sums at each tap add the same terms in the same order. The backward then reads P and
  // the windows' u8 argmax (MaxPoolWithArgmax: a tap index, so kernels of at most 255 taps) instead
  // of R: a 2x2 pool saves 1/16 of R's f32 bytes instead of all of them (P is saved anyway; the CNN
  // bench's stem: 0.5 MiB of argmax instead of 8 MiB).
  bool pooling_by_argmax_pays(const Node& relu) const {
    if (relu.domain() != kOnnxDomain || relu.op_type() != "Relu" || relu.num_inputs() != 1 || !relu.input(0) ||
        relu.num_outputs() != 1 || !relu.output(0) || is_graph_output(relu.output(0)))
      return false;
    const Node* pool = nullptr;
    const Node* pool_grad = nullptr;
    const Node* relu_grad = nullptr;
    for (const Use& u : relu.output(0)->uses) {
      const Node& n = *u.node;
      if (forward_.count(&n)) {
        if (pool || n.domain() != kOnnxDomain || n.op_type() != "MaxPool" || !n.has_attr("kernel_shape") ||
            n.output(1) || is_graph_output(n.output(0)))
          return false;
        int64_t taps = 1;
        for (int64_t k : n.attr_ints("kernel_shape", {})) taps *= k;
        if (taps > 255) return false;
        pool = &n;
      } else if (n.domain() == kTrainrtDomain && n.op_type() == "MaxPoolGrad" && u.input_index == 1 && !pool_grad) {
        pool_grad = &n;
      } else if (n.domain() == kTrainrtDomain && n.op_type() == "ReluGrad" && u.input_index == 1 && !relu_grad) {
        relu_grad = &n;
      } else {
        return false;
      }
    }
    if (!pool || !pool_grad || !relu_grad || relu_grad->input(0) != pool_grad->output(0) ||
        pool_grad->output(0)->uses.size() != 1 || pool_grad->input(0) == nullptr)
      return false;
    return read_by_backward(pool->output(0));
  }

  // The rewrite of rule 5: MaxPool -> MaxPoolWithArgmax (same output P, new Argmax), Shape(R) in the
  // forward, and in place of MaxPoolGrad + ReluGrad: MaxPoolArgmaxGrad(ReluGrad(dP, P), Argmax,
  // Shape(R)) writing the ReluGrad's output value.
  void pool_by_argmax(const Node& relu) {
    Value* r = relu.output(0);
    Node* pool = nullptr;
    Node* pool_grad = nullptr;
    for (const Use& u : r->uses) {
      if (forward_.count(u.node)) pool = u.node;
      else if (u.node->op_type() == "MaxPoolGrad") pool_grad = u.node;
    }
    Node* relu_grad = pool_grad->output(0)->uses.front().node;
    Value* p = pool->output(0);
    Value* dp = pool_grad->input(0);
    const auto attrs = pool->attrs();
    const std::string pool_name = pool->name();
    Node* shape = joint_.add_node("Shape", {r}, {joint_.unique_name(r->name + "/shape")}, kOnnxDomain,
                                  pool_name + "/input_shape");
    shape->output(0)->dtype = DType::kI64;
    shape->output(0)->shape = Shape({r->shape.rank_known ? r->shape.rank() : 0});
    joint_.move_before(shape, pool);
    Value* argmax = joint_.add_value(joint_.unique_name(p->name + "/argmax"));
    argmax->dtype = DType::kU8;
    argmax->shape = p->shape;
    const Node* next = after(pool);
    auto& forward_nodes = gradients_.forward_nodes;
    const auto at = std::find(forward_nodes.begin(), forward_nodes.end(), static_cast<const Node*>(pool));
    const auto index = at - forward_nodes.begin();
    forward_nodes.insert(at, shape);  // Shape(R), then the pool in its place (R is produced earlier)
    forward_.erase(pool);
    joint_.remove_node(pool);
    Node* kept = joint_.add_node_with_outputs("MaxPoolWithArgmax", {r}, {p, argmax}, kTrainrtDomain, pool_name);
    for (const auto& [key, value] : attrs) kept->set_attr(key, value);
    if (next) joint_.move_before(kept, next);
    forward_nodes[static_cast<size_t>(index) + 1] = kept;
    forward_.insert(shape);
    forward_.insert(kept);

    Node* masked = joint_.add_node(relu_grad->op_type(), {dp, p}, {joint_.unique_name(dp->name + "/relu_masked")},
                                   relu_grad->domain(), relu_grad->name() + "/on_pooled");
    masked->output(0)->dtype = dp->dtype;
    masked->output(0)->shape = dp->shape;
    joint_.move_before(masked, pool_grad);
    Value* dr = relu_grad->output(0);
    const std::string grad_name = pool_grad->name();
    const Node* grad_next = after(relu_grad);
    joint_.remove_node(relu_grad);
    joint_.remove_node(pool_grad);
    Node* routed = joint_.add_node_with_outputs("MaxPoolArgmaxGrad", {masked->output(0), argmax, shape->output(0)},
                                                {dr}, kTrainrtDomain, grad_name);
    for (const auto& [key, value] : attrs)
      if (key != "storage_order") routed->set_attr(key, value);
    if (grad_next) joint_.move_before(routed, grad_next);
    made_.pools_by_argmax++;
  }

  // The node after `n` in insertion order, or null.
  const Node* after(const Node* n) const {
    const std::vector<Node*> order = joint_.nodes();
    auto it = std::find(order.begin(), order.end(), n);
    return it == order.end() || it + 1 == order.end() ? nullptr : *(it + 1);
  }

  // A copy of `relu`'s batch norm (output Y only) and of `relu` on it in the backward; every backward
  // reader of the Relu's output reads the copy, placed before the first of them as in
  // recompute_in_backward.
  void recompute_batch_norm_in_backward(const Node& relu) {
    const Node& bn = *relu.input(0)->producer;
    Node* norm = joint_.add_node(bn.op_type(), bn.inputs(), {joint_.unique_name(bn.output(0)->name + "/recompute")},
                                 bn.domain(), recompute_node_name(joint_, bn.name()));
    for (const auto& [key, value] : bn.attrs()) norm->set_attr(key, value);
    norm->output(0)->dtype = bn.output(0)->dtype;
    norm->output(0)->shape = bn.output(0)->shape;
    Node* copy = place_recompute(relu, norm->output(0));
    joint_.move_before(norm, copy);
    made_.batch_norms_recomputed++;
  }

  // The readers of `v`, looking through single-input views: views in `views`, the rest in `workers`.
  void collect_readers(const Value* v, std::vector<Node*>& views, std::unordered_set<const Node*>& workers) const {
    for (const Use& u : v->uses) {
      const OpSchema* schema = OpRegistry::global().find(u.node->domain(), u.node->op_type());
      if (schema && schema->is_view && u.node->num_outputs() == 1 && u.node->output(0)) {
        views.push_back(u.node);
        collect_readers(u.node->output(0), views, workers);
      } else {
        workers.insert(u.node);
      }
    }
  }

  void move_to_forward(const Node* n) {
    forward_.insert(n);
    gradients_.forward_nodes.push_back(n);  // its input is produced earlier in the list
    made_.shapes_moved_to_forward++;
  }

  // The forward SoftmaxCrossEntropyLoss whose log_prob `log_softmax` recomputes, when keeping
  // log_prob saves the recompute without saving more: the backward reads the scores for nothing
  // else and they are no graph output. Null otherwise. The axis and opset conditions are the
  // ones under which the loss gradient (autodiff/loss_gradients.cc) emits a plain LogSoftmax.
  const Node* loss_recomputed_by(const Node& log_softmax) const {
    const Value* scores = log_softmax.input(0);
    if (!scores || !log_softmax.has_attr("axis") || log_softmax.attr_int("axis", 0) != 1 || is_graph_output(scores))
      return nullptr;
    const Node* loss = nullptr;
    for (const Use& use : scores->uses) {
      if (use.node == &log_softmax) continue;
      if (!forward_.count(use.node)) return nullptr;  // another backward reader keeps scores saved
      const Node& n = *use.node;
      if (n.op_type() == "SoftmaxCrossEntropyLoss" && n.domain() == kOnnxDomain && use.input_index == 0 &&
          !n.output(1))
        loss = use.node;
    }
    if (!loss) return nullptr;
    const bool plain_log_softmax = loss->opset() >= 13 || (scores->shape.rank_known && scores->shape.rank() == 2);
    return plain_log_softmax ? loss : nullptr;
  }

  // Replaces `loss` by the same node with log_prob (the output of `log_softmax`) as output 1, in
  // the same place of the insertion order (which the schedule keeps: at the end, behind the
  // backward nodes, it would let every backward node that is ready early run before it).
  void keep_log_prob(const Node* loss, Node* log_softmax) {
    const std::vector<Node*> order = joint_.nodes();
    auto after = std::find_if(std::find(order.begin(), order.end(), loss) + 1, order.end(),
                              [&](const Node* m) { return m != log_softmax; });
    const Node* next = after == order.end() ? nullptr : *after;  // kept goes before it
    Value* log_prob = log_softmax->output(0);
    const std::string op = loss->op_type(), name = loss->name();
    const std::vector<Value*> inputs = loss->inputs();
    const auto attrs = loss->attrs();
    Value* loss_value = loss->output(0);
    joint_.remove_node(log_softmax);
    joint_.remove_node(const_cast<Node*>(loss));
    Node* kept = joint_.add_node_with_outputs(op, inputs, {loss_value, log_prob}, kOnnxDomain, name);
    for (const auto& [key, value] : attrs) kept->set_attr(key, value);
    if (next) joint_.move_before(kept, next);
    std::replace(gradients_.forward_nodes.begin(), gradients_.forward_nodes.end(), loss,
                 static_cast<const Node*>(kept));
    forward_.erase(loss);
    forward_.insert(kept);
    made_.log_probs_kept++;
  }

  Graph& joint_;
  GradientResult& gradients_;
  const std::map<std::string, int>& recompute_regions_;
  const std::set<std::string>& kept_;
  std::unordered_set<const Node*> forward_;
  std::unordered_set<std::string> grad_inputs_;
  SavedValueChoices made_;
};

}  // namespace

SavedValueChoices choose_saved_values(Graph& joint, GradientResult& gradients,
                                      const std::map<std::string, int>& recompute_regions,
                                      const std::set<std::string>& kept) {
  return SavedValueChooser(joint, gradients, recompute_regions, kept).choose();
}

}  // namespace trainrt
