#include "trainrt/plan/saved_values.h"

#include <algorithm>
#include <unordered_set>

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

  // Replaces `loss` by the same node with log_prob (the output of `log_softmax`) as output 1.
  void keep_log_prob(const Node* loss, Node* log_softmax) {
    Value* log_prob = log_softmax->output(0);
    const std::string op = loss->op_type(), name = loss->name();
    const std::vector<Value*> inputs = loss->inputs();
    const auto attrs = loss->attrs();
    Value* loss_value = loss->output(0);
    joint_.remove_node(log_softmax);
    joint_.remove_node(const_cast<Node*>(loss));
    Node* kept = joint_.add_node_with_outputs(op, inputs, {loss_value, log_prob}, kOnnxDomain, name);
    for (const auto& [key, value] : attrs) kept->set_attr(key, value);
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
