#include "trainrt/runtime/bf16_widening.h"

#include <map>

#include "trainrt/core/logging.h"

namespace trainrt {
namespace {

bool needs_widening(const Node& node, const KernelTable& kernels) {
  return KernelTable::key_dtype(node) == DType::kBF16 &&
         kernels.find(node.domain(), node.op_type(), DType::kBF16) == nullptr;
}

// A new value like `v` (same shape) of dtype f32, with no producer yet.
Value* f32_twin(Graph& graph, const Value& v, const std::string& suffix) {
  Value* w = graph.add_value(graph.unique_name(v.name + suffix));
  w->dtype = DType::kF32;
  w->shape = v.shape;
  return w;
}

Node* add_cast(Graph& graph, Value* from, Value* to, DType dtype) {
  Node* cast = graph.add_node_with_outputs("Cast", {from}, {to}, kOnnxDomain,
                                           graph.unique_name(to->name + "/Cast"));
  cast->set_attr("to", Attribute::of_int(dtype_to_onnx(dtype)));
  return cast;
}

}  // namespace

std::vector<std::string> widen_bf16_without_kernel(Graph& graph, const KernelTable& kernels) {
  std::vector<Node*> targets;
  for (Node* n : graph.topological_order())
    if (needs_widening(*n, kernels)) targets.push_back(n);
  std::map<Value*, Value*> widened;  // bf16 value -> its Cast to f32
  std::vector<std::string> names;
  for (Node* n : targets) {
    std::vector<Value*> inputs;
    for (Value* v : n->inputs()) {
      if (!v || v->dtype != DType::kBF16) {
        inputs.push_back(v);
        continue;
      }
      Value*& w = widened[v];
      if (!w) add_cast(graph, v, w = f32_twin(graph, *v, "/f32"), DType::kF32);
      inputs.push_back(w);
    }
    std::vector<Value*> outputs, narrowed;  // the node's new outputs; the bf16 values they feed
    for (Value* v : n->outputs()) {
      if (v && v->dtype == DType::kBF16) {
        outputs.push_back(f32_twin(graph, *v, "/f32"));
        narrowed.push_back(v);
      } else {
        outputs.push_back(v);
        narrowed.push_back(nullptr);
      }
    }
    const std::string op = n->op_type(), domain = n->domain(), name = n->name();
    const auto attrs = n->attrs();
    graph.remove_node(n);
    Node* wide = graph.add_node_with_outputs(op, inputs, outputs, domain, name);
    for (const auto& [key, value] : attrs) wide->set_attr(key, value);
    for (size_t o = 0; o < outputs.size(); ++o)
      if (narrowed[o]) add_cast(graph, outputs[o], narrowed[o], DType::kBF16);
    TRAINRT_LOG(kVerbose) << "bf16: " << wide->describe() << " has no bf16 kernel; runs in f32 between casts";
    names.push_back(name);
  }
  return names;
}

}  // namespace trainrt
