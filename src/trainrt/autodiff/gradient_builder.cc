#include "trainrt/autodiff/gradient_builder.h"

#include <unordered_map>
#include <unordered_set>

#include "trainrt/autodiff/grad_context.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {

// The name of each accumulation Sum's output: the value's name and this (is_gradient_sum).
constexpr std::string_view kGradientSumSuffix = "_grad_sum";
namespace {

bool carries_gradient(const Value* v) { return v && is_floating(v->dtype); }

class Builder {
 public:
  Builder(Graph& graph, const GradientRequest& request) : graph_(graph), request_(request) {}

  GradientResult build() {
    infer_graph_shapes(graph_);
    for (const Node* n : graph_.topological_order()) result_.forward_nodes.push_back(n);
    for (const Value* v : graph_.outputs()) result_.forward_outputs.push_back(v->name);
    std::vector<Value*> seeds = seed_gradients();
    mark_dependents();
    mark_reaching(seeds);
    mark_connected(seeds);
    for (auto it = result_.forward_nodes.rbegin(); it != result_.forward_nodes.rend(); ++it)
      backprop_through(**it);
    publish_gradients();
    return std::move(result_);
  }

 private:
  Value* require_value(const std::string& name, const char* what) {
    Value* v = graph_.find_value(name);
    if (!v) throw InvalidModel(fmt("gradient request: ", what, " '", name, "' is not a value of the graph"));
    return v;
  }

  std::vector<Value*> seed_gradients() {
    std::vector<Value*> seeds;
    if (!request_.loss.empty()) {
      Value* loss = require_value(request_.loss, "loss");
      if (!carries_gradient(loss))
        throw InvalidModel(fmt("loss '", loss->name, "' has dtype ", dtype_name(loss->dtype),
                               "; it must be floating point"));
      Value* one;
      if (loss->shape.is_static()) {
        Tensor ones = Tensor::empty(loss->dtype, loss->shape.concrete());
        for (int64_t i = 0; i < ones.numel(); ++i) write_one(ones, i);
        one = graph_.add_initializer(graph_.unique_name(loss->name + "_grad_seed"), std::move(ones));
      } else {
        Tensor one_value = Tensor::empty(loss->dtype, {1});
        write_one(one_value, 0);
        Node* shape = graph_.add_node("Shape", {loss}, {graph_.unique_name(loss->name + "_shape")});
        Node* n = graph_.add_node("ConstantOfShape", {shape->output(0)}, {graph_.unique_name(loss->name + "_grad_seed")});
        n->set_attr("value", Attribute::of_tensor(std::move(one_value)));
        one = n->output(0);
        one->dtype = loss->dtype;
        one->shape = loss->shape;
      }
      contributions_[loss].push_back(one);
      seeds.push_back(loss);
    }
    for (const std::string& name : request_.outputs_with_grad) {
      Value* out = require_value(name, "output");
      Value* g = graph_.add_input(graph_.unique_name(name + "_grad"), out->dtype, out->shape);
      result_.output_grad_inputs.push_back(g->name);
      contributions_[out].push_back(g);
      seeds.push_back(out);
    }
    // No loss and no outputs with gradients (a module whose outputs are all integers): nothing to
    // differentiate; every wrt entry is unreached and the backward is empty.
    return seeds;
  }

  static void write_one(Tensor& t, int64_t i) {
    visit_dtype(t.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, Half>) t.data<T>()[i] = Half{f32_to_f16(1.f)};
      else if constexpr (std::is_same_v<T, BFloat16>) t.data<T>()[i] = BFloat16{f32_to_bf16(1.f)};
      else t.data<T>()[i] = static_cast<T>(1);
    });
  }

  // Values that depend (through floating-point values) on a requested value.
  void mark_dependents() {
    for (const std::string& name : request_.wrt) {
      Value* v = require_value(name, "requested value");
      if (!carries_gradient(v))
        throw InvalidModel(fmt("cannot differentiate with respect to '", name, "' of dtype ", dtype_name(v->dtype)));
      depends_.insert(v);
    }
    for (const Node* n : result_.forward_nodes) {
      bool any = false;
      for (const Value* in : n->inputs()) any = any || depends_.count(in);
      if (!any) continue;
      for (const Value* out : n->outputs())
        if (carries_gradient(out)) depends_.insert(out);
    }
  }

  // Values from which a seed is reachable, through float values and every input.
  void mark_reaching(const std::vector<Value*>& seeds) {
    mark_upstream(seeds, reaches_, [](const Node&, int) { return true; });
  }

  // Values a seed depends on in torch's autograd graph: through float values and the inputs that
  // `in_autograd_graph` keeps. A requested value connected to a seed only through ops whose gradient
  // is zero (floor, round, sign, x ** 0, ...) gets zeros, as in eager; one not connected at all is
  // unreached (eager's grad None).
  void mark_connected(const std::vector<Value*>& seeds) { mark_upstream(seeds, connected_, in_autograd_graph); }

  // Adds to `marked` the seeds and every float value upstream of them through inputs `follow` keeps.
  template <typename Follow>
  static void mark_upstream(const std::vector<Value*>& seeds, std::unordered_set<const Value*>& marked,
                            Follow follow) {
    std::vector<const Value*> stack(seeds.begin(), seeds.end());
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (!marked.insert(v).second || !v->producer) continue;
      for (int i = 0; i < v->producer->num_inputs(); ++i)
        if (carries_gradient(v->producer->input(i)) && follow(*v->producer, i)) stack.push_back(v->producer->input(i));
    }
  }

  // Whether torch's autograd graph links the node's input i to its outputs: not StopGradient's
  // (detach, no_grad blocks), not CastLike's target (read for its dtype), not a PythonOp input that
  // is no autograd input of the Function (a tensor inside a list argument).
  static bool in_autograd_graph(const Node& n, int i) {
    if (n.domain() == kTrainrtDomain && n.op_type() == "StopGradient") return false;
    if (n.domain() == kOnnxDomain && n.op_type() == "CastLike") return i == 0;
    if (n.domain() == kTrainrtDomain && n.op_type() == "PythonOp") {
      const std::vector<int64_t> differentiable = n.attr_ints("input_requires_grad", {});
      return static_cast<size_t>(i) < differentiable.size() && differentiable[static_cast<size_t>(i)] != 0;
    }
    return true;
  }

  bool needs_grad(const Value* v) const { return carries_gradient(v) && depends_.count(v) && reaches_.count(v); }

  // The accumulated gradient of v: its single contribution, or the Sum of all of them.
  Value* accumulated(const Value* v) {
    auto it = contributions_.find(v);
    if (it == contributions_.end() || it->second.empty()) return nullptr;
    std::vector<Value*>& parts = it->second;
    if (parts.size() > 1) {
      Node* sum = graph_.add_node("Sum", parts, {graph_.unique_name(v->name + std::string(kGradientSumSuffix))});
      sum->output(0)->dtype = v->dtype;
      sum->output(0)->shape = v->shape;
      parts = {sum->output(0)};
    }
    return parts[0];
  }

  void backprop_through(const Node& node) {
    std::vector<Value*> output_grads;
    bool any_output = false;
    for (const Value* out : node.outputs()) {
      Value* g = out && needs_grad(out) ? accumulated(out) : nullptr;
      any_output = any_output || g;
      output_grads.push_back(g);
    }
    if (!any_output) return;
    std::vector<bool> needs_input;
    bool any_input = false;
    for (const Value* in : node.inputs()) {
      needs_input.push_back(needs_grad(in));
      any_input = any_input || needs_input.back();
    }
    if (!any_input) return;
    const GradientRegistry& rules = GradientRegistry::global();
    const GradFn* rule = rules.find(node.domain(), node.op_type());
    if (!rule) {
      if (rules.is_non_differentiable(node.domain(), node.op_type())) return;
      throw UnsupportedOp(fmt(node.describe(), ": no gradient rule for op ", node.op_type(),
                              " (needed to differentiate '", request_.loss.empty() ? "outputs" : request_.loss, "')"));
    }
    GradContext ctx(graph_, node, std::move(output_grads), std::move(needs_input));
    (*rule)(ctx);
    for (int i = 0; i < node.num_inputs(); ++i)
      if (Value* g = ctx.input_grads()[static_cast<size_t>(i)]) contributions_[node.input(i)].push_back(g);
  }

  void publish_gradients() {
    for (const std::string& name : request_.wrt) {
      Value* v = graph_.find_value(name);
      Value* g = accumulated(v);
      if (!g) {
        if (!connected_.count(v)) result_.unreached.push_back(name);
        g = zeros_like(v);
      }
      // Rename the gradient value in place unless it cannot own the name: a graph input, the
      // seed, a value already published for another request (Add(a, b) gives both dY), ...
      bool own = g->producer && !g->is_initializer() && !published_.count(g) && !contributions_.count(g) &&
                 !graph_.find_value(name + "_grad");
      if (own) {
        graph_.rename_value(g, name + "_grad");
      } else {
        Node* id = graph_.add_node("Identity", {g}, {graph_.unique_name(name + "_grad")});
        id->output(0)->dtype = g->dtype;
        id->output(0)->shape = g->shape;
        g = id->output(0);
      }
      published_.insert(g);
      graph_.add_output(g);
      result_.grad_of[name] = g->name;
    }
  }

  Value* zeros_like(Value* v) {
    Node* shape = graph_.add_node("Shape", {v}, {graph_.unique_name(v->name + "_shape")});
    infer_and_store(*shape);  // i64 (rank): the partition may hand it from the forward to the backward
    Node* n = graph_.add_node("ConstantOfShape", {shape->output(0)}, {graph_.unique_name(v->name + "_zero_grad")});
    n->set_attr("value", Attribute::of_tensor(Tensor::zeros(v->dtype, {1})));
    n->output(0)->dtype = v->dtype;
    n->output(0)->shape = v->shape;
    return n->output(0);
  }

  Graph& graph_;
  const GradientRequest& request_;
  GradientResult result_;
  std::unordered_set<const Value*> depends_, reaches_, connected_, published_;
  std::unordered_map<const Value*, std::vector<Value*>> contributions_;
};

}  // namespace

GradientResult build_gradients(Graph& graph, const GradientRequest& request) {
  return Builder(graph, request).build();
}

bool is_gradient_sum(const Node& n) {
  return n.op_type() == "Sum" && n.domain() == kOnnxDomain && n.output(0) &&
         n.output(0)->name.find(kGradientSumSuffix) != std::string::npos;
}

}  // namespace trainrt
