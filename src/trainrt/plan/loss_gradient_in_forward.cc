#include "trainrt/plan/loss_gradient_in_forward.h"

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/core/dtype.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/graph_edit.h"
#include "trainrt/passes/pass.h"

namespace trainrt {
namespace {

// Whether `n` is linear in its input `index` for fixed other inputs: what the chain grows through.
bool linear_in(const Node& n, int index) {
  static const std::unordered_set<std::string> kFirstInput = {
      "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast",
      "ReduceSum", "ReduceMean", "ReduceSumToShape", "Div"};
  static const std::unordered_set<std::string> kEitherOperand = {"MatMul", "FusedMatMul", "Mul"};
  if ((n.domain() != kOnnxDomain && n.domain() != kTrainrtDomain) || n.num_outputs() != 1 || !n.output(0))
    return false;
  if (kFirstInput.count(n.op_type())) return index == 0;
  if (kEitherOperand.count(n.op_type())) return index <= 1;
  if (n.op_type() == "Gemm") return index <= 1 && !n.input(2);
  return false;
}

// A loss gradient's chain through the head (the header's terms).
struct Chain {
  std::vector<Node*> pre;          // the backward's recompute of log_prob from forward values, if any
  Node* grad = nullptr;            // SoftmaxCrossEntropyLossGrad(dL, log_prob, labels, [weights])
  std::vector<Node*> before;       // linear nodes up to the merge, grad first, in schedule order
  Node* merge = nullptr;           // Sum(chain part, external part), or null
  Value* external = nullptr;       // the merge's other operand: a gradient from outside the chain
  std::vector<Node*> after;        // linear nodes past the merge, in schedule order
  std::vector<Value*> boundaries;  // chain values read outside the chain, or graph outputs
  std::unordered_set<const Value*> past_merge;  // chain values computed from the merge's output
};

// Bytes at each probe size of the dynamic dims (the header's 1, 16, 1024); null when unknown.
constexpr std::array<int64_t, 3> kProbes = {1, 16, 1024};
std::optional<std::array<double, 3>> probe_bytes(const Value& v) {
  if (!v.shape.rank_known || v.dtype == DType::kUndefined) return std::nullopt;
  std::array<double, 3> bytes;
  for (size_t p = 0; p < kProbes.size(); ++p) {
    double b = static_cast<double>(dtype_size(v.dtype));
    for (const Dim& d : v.shape.dims) b *= static_cast<double>(d.is_static() ? d.value : kProbes[p]);
    bytes[p] = b;
  }
  return bytes;
}

class LossGradientMover {
 public:
  LossGradientMover(Graph& joint, GradientResult& gradients)
      : joint_(joint), gradients_(gradients),
        forward_(gradients.forward_nodes.begin(), gradients.forward_nodes.end()),
        grad_inputs_(gradients.output_grad_inputs.begin(), gradients.output_grad_inputs.end()) {
    for (const auto& [wrt, grad] : gradients.grad_of) grads_.insert(grad);
  }

  int run() {
    std::vector<Node*> losses;
    for (Node* n : joint_.nodes())
      if (!forward_.count(n) && n->domain() == kTrainrtDomain && n->op_type() == "SoftmaxCrossEntropyLossGrad")
        losses.push_back(n);
    int moved = 0;
    for (Node* loss_grad : losses) {
      std::optional<Chain> chain = find_chain(loss_grad);
      if (chain && pays(*chain)) {
        rewrite(*chain);
        ++moved;
      }
    }
    return moved;
  }

 private:
  bool is_forward_value(const Value* v) const {
    if (!v) return true;  // an omitted optional input
    if (v->producer) return forward_.count(v->producer) > 0;
    return !grad_inputs_.count(v->name);
  }

  // Whether `v` is a forward value, or made in the backward from forward values alone by LogSoftmax
  // and reshaping ops: the loss gradient's own log_prob, recomputed where the forward keeps none
  // (rule 2 leaves it so when the scores are a graph output). Those nodes join `pre`, producers first.
  bool forward_computable(Value* v, std::vector<Node*>& pre, int depth = 0) const {
    if (is_forward_value(v)) return true;
    static const std::unordered_set<std::string> kOps = {"LogSoftmax", "Transpose", "Reshape", "Cast"};
    Node* p = v->producer;
    if (!p || depth > 4 || p->domain() != kOnnxDomain || !kOps.count(p->op_type()) || p->num_outputs() != 1)
      return false;
    for (Value* in : p->inputs())
      if (!forward_computable(in, pre, depth + 1)) return false;
    if (std::find(pre.begin(), pre.end(), p) == pre.end()) pre.push_back(p);
    return true;
  }

  std::optional<Chain> find_chain(Node* grad) const {
    const Value* dl = grad->input(0);
    if (!dl || dl->dtype != DType::kF32 || !dl->shape.rank_known || dl->shape.rank() != 0 || is_forward_value(dl))
      return std::nullopt;
    Chain c;
    for (int i = 1; i < grad->num_inputs(); ++i)
      if (!forward_computable(grad->input(i), c.pre)) return std::nullopt;
    for (const Node* n : c.pre)  // made for the loss gradient alone
      for (const Use& u : n->output(0)->uses)
        if (u.node != grad && std::find(c.pre.begin(), c.pre.end(), u.node) == c.pre.end()) return std::nullopt;
    c.grad = grad;
    std::unordered_set<const Node*> members = {grad};
    std::vector<Value*> work = {grad->output(0)};
    std::unordered_set<const Value*> boundaries;
    while (!work.empty()) {
      Value* v = work.back();
      work.pop_back();
      if (is_graph_output(joint_, v)) boundaries.insert(v);
      for (const Use& use : v->uses) {
        Node* n = use.node;
        if (members.count(n)) continue;
        const bool past = c.past_merge.count(v) > 0;
        bool others_forward = true;
        for (int i = 0; i < n->num_inputs(); ++i)
          if (i != use.input_index && !is_forward_value(n->input(i))) others_forward = false;
        if (!forward_.count(n) && linear_in(*n, use.input_index) && others_forward) {
          members.insert(n);
          if (past) c.past_merge.insert(n->output(0));
          work.push_back(n->output(0));
        } else if (!c.merge && !past && n->op_type() == "Sum" && n->num_inputs() == 2 && is_gradient_sum(*n) &&
                   !is_forward_value(n->input(1 - use.input_index))) {
          c.merge = n;
          c.external = n->input(1 - use.input_index);
          members.insert(n);
          c.past_merge.insert(n->output(0));
          work.push_back(n->output(0));
        } else {
          boundaries.insert(v);
        }
      }
    }
    // Linear in dL only if each member reads one chain value (a product of two chain values is not).
    for (const Node* n : members) {
      int chain_inputs = 0;
      for (const Value* v : n->inputs())
        chain_inputs += v && v->producer && members.count(v->producer);
      if (n != grad && chain_inputs != 1) return std::nullopt;
    }
    if (c.merge && (boundaries.count(c.merge->output(0)) || members.count(c.external->producer)))
      return std::nullopt;
    if (boundaries.empty()) return std::nullopt;
    for (Node* n : joint_.topological_order()) {  // schedule order, so the rewrite is the same every run
      if (!members.count(n)) continue;
      if (boundaries.count(n->output(0))) c.boundaries.push_back(n->output(0));
      if (n != c.merge) (c.past_merge.count(n->output(0)) ? c.after : c.before).push_back(n);
    }
    return c;
  }

  // Whether `b`, read once outside the chain, is a parameter's gradient, or summed or cast into
  // one: held by the backward to its end however it is made.
  bool becomes_gradient(const Value* b, const std::unordered_set<const Node*>& members) const {
    if (grads_.count(b->name)) return true;
    const Value* v = b;
    for (int depth = 0; depth < 8; ++depth) {
      std::vector<Use> outside;
      for (const Use& u : v->uses)
        if (!members.count(u.node)) outside.push_back(u);
      if (outside.size() != 1) return false;
      const Node& n = *outside[0].node;
      const bool passes = n.op_type() == "Sum" || n.op_type() == "Add" || n.op_type() == "Cast" ||
                          n.op_type() == "Reshape" || n.op_type() == "Identity" ||
                          (n.op_type() == "GatherGrad" && outside[0].input_index == 3);
      if (!passes || !n.output(0)) return false;
      v = n.output(0);
      if (grads_.count(v->name)) return true;
    }
    return false;
  }

  // The activations the backward no longer reads against the boundaries' forward copies it reads
  // instead (those that are no parameter's gradient), at every probe size.
  bool pays(const Chain& c) const {
    std::unordered_set<const Node*> members(c.before.begin(), c.before.end());
    members.insert(c.after.begin(), c.after.end());
    if (c.merge) members.insert(c.merge);
    std::vector<const Node*> leaving_nodes(c.pre.begin(), c.pre.end());
    leaving_nodes.insert(leaving_nodes.end(), c.before.begin(), c.before.end());
    const std::unordered_set<const Node*> leaving(leaving_nodes.begin(), leaving_nodes.end());
    std::array<double, 3> freed{}, added{};
    std::unordered_set<const Value*> counted;
    for (const Node* n : leaving_nodes)
      for (const Value* v : n->inputs()) {
        if (!v || !v->producer || !forward_.count(v->producer) || !counted.insert(v).second) continue;
        const bool read_elsewhere = std::any_of(v->uses.begin(), v->uses.end(), [&](const Use& u) {
          return !forward_.count(u.node) && !leaving.count(u.node);
        });
        if (read_elsewhere) continue;
        const auto bytes = probe_bytes(*v);
        if (!bytes) return false;
        for (size_t p = 0; p < kProbes.size(); ++p) freed[p] += (*bytes)[p];
      }
    for (const Value* b : c.boundaries) {
      if (becomes_gradient(b, members)) continue;
      const auto bytes = probe_bytes(*b);
      if (!bytes) return false;
      for (size_t p = 0; p < kProbes.size(); ++p) added[p] += (*bytes)[p];
    }
    for (size_t p = 0; p < kProbes.size(); ++p)
      if (freed[p] <= added[p]) return false;
    return true;
  }

  // dL * x for the boundary's forward copy x, named `name`; a non-f32 x is scaled in f32 and rounded
  // back once.
  Value* scale(Value* x, Value* dl, const std::string& name) {
    if (x->dtype == dl->dtype) {
      Node* mul = joint_.add_node("Mul", {x, dl}, {name});
      infer_and_store(*mul);
      return mul->output(0);
    }
    const auto cast = [](DType t) { return std::vector<std::pair<std::string, Attribute>>{{"to", Attribute::of_int(dtype_to_onnx(t))}}; };
    Value* wide = add_op(joint_, "Cast", {x}, name + "/f32", kOnnxDomain, cast(dl->dtype));
    Value* scaled = add_op(joint_, "Mul", {wide, dl}, name + "/scaled");
    Node* back = joint_.add_node("Cast", {scaled}, {name});
    back->set_attr("to", Attribute::of_int(dtype_to_onnx(x->dtype)));
    infer_and_store(*back);
    return back->output(0);
  }

  void rewrite(const Chain& c) {
    Value* dl = c.grad->input(0);
    Value* one = joint_.add_initializer(joint_.unique_name(dl->name + "/one"), Tensor::scalar<float>(1.f));
    // The forward: the chain for dL = 1, the merge passing the loss's part through.
    std::unordered_map<const Value*, Value*> in_forward;
    const auto copy_to_forward = [&](const Node* n) {
      std::vector<Value*> inputs;
      for (Value* v : n->inputs()) {
        auto it = v ? in_forward.find(v) : in_forward.end();
        inputs.push_back(it == in_forward.end() ? v : it->second);
      }
      if (n == c.grad) inputs[0] = one;
      Node* copy = add_like(joint_, *n, inputs, "/in_forward");
      gradients_.forward_nodes.push_back(copy);
      forward_.insert(copy);
      in_forward[n->output(0)] = copy->output(0);
    };
    const size_t first_copy = static_cast<size_t>(joint_.num_nodes());
    for (const Node* n : c.pre) copy_to_forward(n);
    for (const Node* n : c.before) copy_to_forward(n);
    if (c.merge) {
      const Value* loss_part = c.merge->input(0) == c.external ? c.merge->input(1) : c.merge->input(0);
      in_forward[c.merge->output(0)] = in_forward.at(loss_part);
    }
    for (const Node* n : c.after) copy_to_forward(n);
    // Where the chain began in insertion order, which the joint's schedule (and so the backward's
    // node order) keeps among ready nodes: at the end, every backward node ready before them
    // (the recomputes of saved values) would run first, all live at once.
    place_before(joint_, first_copy, c.pre.empty() ? c.grad : c.pre.front());

    // The backward: past the merge, the products read the external part alone.
    std::unordered_set<const Node*> members(c.before.begin(), c.before.end());
    members.insert(c.after.begin(), c.after.end());
    if (c.merge) {
      members.insert(c.merge);
      const std::vector<Use> uses = c.merge->output(0)->uses;
      for (const Use& u : uses) u.node->replace_input(u.input_index, c.external);
    }
    // The loss's part before the merge leaves the backward (once nothing reads it, below).
    std::vector<Node*> removed = c.before;
    removed.insert(removed.end(), c.pre.begin(), c.pre.end());
    if (c.merge) removed.push_back(c.merge);
    const std::unordered_set<const Node*> leaving(removed.begin(), removed.end());
    const std::vector<Node*> order = joint_.nodes();
    // Each boundary becomes dL * its forward copy (+ its backward part past the merge), made where
    // its producer was.
    for (Value* b : c.boundaries) {
      std::vector<Use> outside;
      for (const Use& u : b->uses)
        if (!members.count(u.node)) outside.push_back(u);
      auto at = std::find(order.begin(), order.end(), b->producer);
      const auto next = std::find_if(at + 1, order.end(), [&](const Node* n) { return !leaving.count(n); });
      const Node* anchor = next == order.end() ? nullptr : *next;
      const size_t first = static_cast<size_t>(joint_.num_nodes());
      const std::string name = b->name;
      joint_.rename_value(b, joint_.unique_name(name + "/chain"));
      const bool past = c.past_merge.count(b) > 0;
      Value* total = scale(in_forward.at(b), dl, past ? joint_.unique_name(name + "/from_loss") : name);
      if (past) {
        Node* sum = joint_.add_node("Sum", {total, b}, {name});
        infer_and_store(*sum);
        total = sum->output(0);
      }
      for (const Use& u : outside) u.node->replace_input(u.input_index, total);
      for (Value*& out : joint_.mutable_outputs())
        if (out == b) out = total;
      place_before(joint_, first, anchor);
    }
    remove_unread(joint_, removed);
  }

  Graph& joint_;
  GradientResult& gradients_;
  std::unordered_set<const Node*> forward_;
  std::unordered_set<std::string> grad_inputs_, grads_;
};

}  // namespace

int make_loss_gradients_in_forward(Graph& joint, GradientResult& gradients) {
  return LossGradientMover(joint, gradients).run();
}

}  // namespace trainrt
