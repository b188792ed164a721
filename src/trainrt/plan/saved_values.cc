#include "trainrt/plan/saved_values.h"

#include <algorithm>
#include <unordered_set>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

class SavedValueChooser {
 public:
  SavedValueChooser(Graph& joint, GradientResult& gradients)
      : joint_(joint), gradients_(gradients),
        forward_(gradients.forward_nodes.begin(), gradients.forward_nodes.end()),
        grad_inputs_(gradients.output_grad_inputs.begin(), gradients.output_grad_inputs.end()) {}

  SavedValueChoices choose() {
    for (Node* n : joint_.nodes()) {
      if (forward_.count(n) || n->domain() != kOnnxDomain) continue;
      if ((n->op_type() == "Shape" || n->op_type() == "Size") && is_forward_value(n->input(0))) move_to_forward(n);
    }
    std::vector<Node*> log_softmaxes;  // collected first: keep_log_prob removes nodes
    for (Node* n : joint_.nodes())
      if (!forward_.count(n) && n->domain() == kOnnxDomain && n->op_type() == "LogSoftmax") log_softmaxes.push_back(n);
    for (Node* n : log_softmaxes)
      if (const Node* loss = loss_recomputed_by(*n)) keep_log_prob(loss, n);
    std::vector<Node*> pointwise;  // collected first: recompute adds nodes
    for (Node* n : joint_.nodes())
      if (forward_.count(n) && recomputing_pays(*n)) pointwise.push_back(n);
    for (Node* n : pointwise) recompute_in_backward(*n);
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
    const Value* x = n.input(0);
    if (!x->producer) return is_forward_value(x);
    return forward_.count(x->producer) && read_by_backward(x);
  }

  // A copy of `n` in the backward, on the same input; every backward reader reads the copy instead.
  // The copy is ready as soon as the forward ends, and the schedule keeps insertion order among
  // ready nodes, so it goes just before the first reader that does work (through views such as
  // the Flatten a weight-gradient Gemm reads, which move along): its output then lives from there
  // to its last reader, not from the start of the backward.
  void recompute_in_backward(const Node& n) {
    Value* y = n.output(0);
    std::vector<Use> readers;
    for (const Use& u : y->uses)
      if (!forward_.count(u.node)) readers.push_back(u);
    Node* copy = joint_.add_node(n.op_type(), {n.input(0)}, {joint_.unique_name(y->name + "/recompute")}, n.domain(),
                                 n.name() + "/recompute");
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
    made_.pointwise_recomputed++;
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
  std::unordered_set<const Node*> forward_;
  std::unordered_set<std::string> grad_inputs_;
  SavedValueChoices made_;
};

}  // namespace

SavedValueChoices choose_saved_values(Graph& joint, GradientResult& gradients) {
  return SavedValueChooser(joint, gradients).choose();
}

}  // namespace trainrt
