#include "trainrt/autodiff/grad_context.h"

#include "trainrt/autodiff/low_precision.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
GradContext::GradContext(Graph& graph, const Node& node, std::vector<Value*> output_grads,
                         std::vector<bool> needs_input_grad)
    : graph_(graph), node_(node), output_grads_(std::move(output_grads)),
      needs_input_grad_(std::move(needs_input_grad)),
      input_grads_(static_cast<size_t>(node.num_inputs()), nullptr) {}

Value* GradContext::output_grad(int i) const {
  return i < static_cast<int>(output_grads_.size()) ? output_grads_[static_cast<size_t>(i)] : nullptr;
}

bool GradContext::needs_input_grad(int i) const {
  return i < static_cast<int>(needs_input_grad_.size()) && needs_input_grad_[static_cast<size_t>(i)];
}

void GradContext::set_input_grad(int i, Value* grad) {
  if (!needs_input_grad(i) || !grad) return;
  input_grads_[static_cast<size_t>(i)] = grad;
}

std::string GradContext::fresh_name(const std::string& hint) {
  return graph_.unique_name(node_.name() + "/grad/" + hint + "_" + std::to_string(counter_++));
}

Value* GradContext::emit(const std::string& op, const std::vector<Value*>& inputs,
                         const std::map<std::string, Attribute>& attrs, std::string_view domain) {
  return emit_multi(op, inputs, 1, attrs, domain)[0];
}

std::vector<Value*> GradContext::emit_multi(const std::string& op, const std::vector<Value*>& inputs,
                                            int num_outputs, const std::map<std::string, Attribute>& attrs,
                                            std::string_view domain, const std::vector<bool>& wanted) {
  std::vector<std::string> names;
  for (int o = 0; o < num_outputs; ++o) {
    bool want = wanted.empty() || wanted[static_cast<size_t>(o)];
    names.push_back(want ? fresh_name(op) : std::string());
  }
  Node* n = graph_.add_node(op, inputs, names, domain, fresh_name(op + "_node"));
  for (const auto& [k, a] : attrs) n->set_attr(k, a);
  if (!domain.empty() && graph_.opset(std::string(domain)) == 0) graph_.set_opset(std::string(domain), 1);
  try {
    infer_and_store(*n);
  } catch (const ShapeError&) {
    // A gradient op that takes f32 / f64 only, of a bf16 / f16 model: computed in f32 (low_precision.h).
    const DType low = low_precision_input(*n);
    if (low == DType::kUndefined) throw;
    return compute_in_f32(graph_, n, low);
  }
  return n->outputs();
}

Value* GradContext::scalar_like(Value* like, double value) {
  Tensor t = Tensor::empty(like->dtype, {});
  visit_dtype(like->dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, Half>) *t.data<T>() = Half{f32_to_f16(static_cast<float>(value))};
    else if constexpr (std::is_same_v<T, BFloat16>) *t.data<T>() = BFloat16{f32_to_bf16(static_cast<float>(value))};
    else *t.data<T>() = static_cast<T>(value);
  });
  return graph_.add_initializer(fresh_name("const"), std::move(t));
}

Value* GradContext::const_i64(const std::vector<int64_t>& values) {
  return graph_.add_initializer(fresh_name("ints"), Tensor::from_i64(values));
}

Value* GradContext::shape_of(Value* v) { return emit("Shape", {v}); }

Value* GradContext::reduce_to_shape_of(Value* grad, Value* like) {
  if (grad->shape.known_equal(like->shape)) return grad;
  Value* reduced = emit("ReduceSumToShape", {grad, shape_of(like)}, {}, kTrainrtDomain);
  reduced->shape = like->shape;  // keeps the symbolic dims inference cannot see through Shape
  return reduced;
}

// ---- GradientRegistry ----

const GradientRegistry& GradientRegistry::global() {
  static const GradientRegistry registry = [] {
    GradientRegistry r;
    register_all_gradients(r);
    return r;
  }();
  return registry;
}

void GradientRegistry::add(std::string_view domain, std::string_view op, GradFn fn) {
  rules_[{std::string(domain), std::string(op)}] = fn;
}

void GradientRegistry::add_non_differentiable(std::string_view domain, std::string_view op) {
  non_differentiable_[{std::string(domain), std::string(op)}] = true;
}

const GradFn* GradientRegistry::find(const std::string& domain, const std::string& op) const {
  auto it = rules_.find({domain == "ai.onnx" ? std::string() : domain, op});
  return it == rules_.end() ? nullptr : &it->second;
}

bool GradientRegistry::is_non_differentiable(const std::string& domain, const std::string& op) const {
  return non_differentiable_.count({domain == "ai.onnx" ? std::string() : domain, op}) > 0;
}

}  // namespace trainrt
