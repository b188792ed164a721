#include "trainrt/ops/op_schema.h"

#include <map>

#include "trainrt/ops/register_schemas.h"

namespace trainrt {

void InferenceContext::set_output(int i, DType dtype, Shape shape) {
  if (i >= num_outputs()) return;
  outputs_[static_cast<size_t>(i)].dtype = dtype;
  outputs_[static_cast<size_t>(i)].shape = std::move(shape);
}

void InferenceContext::set_output_value(int i, Tensor value) {
  if (i >= num_outputs()) return;
  Output& o = outputs_[static_cast<size_t>(i)];
  o.dtype = value.dtype();
  o.shape = Shape::of(value.dims());
  o.value = std::move(value);
}

void InferenceContext::fail(const std::string& message) const {
  throw ShapeError(node_.describe() + ": " + message);
}

void InferenceContext::expect_dtype(int i, std::initializer_list<DType> allowed) const {
  DType t = input_dtype(i);
  for (DType a : allowed)
    if (a == t) return;
  std::string names;
  for (DType a : allowed) names += (names.empty() ? "" : ", ") + std::string(dtype_name(a));
  fail(fmt("input ", i, " has dtype ", dtype_name(t), ", expected one of ", names));
}

const InferenceContext::Input& InferenceContext::require(int i) const {
  if (!has_input(i)) fail(fmt("input ", i, " is required but missing"));
  return inputs_[static_cast<size_t>(i)];
}

const OpRegistry& OpRegistry::global() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_all_schemas(r);
    return r;
  }();
  return registry;
}

void OpRegistry::add(OpSchema schema) {
  auto key = std::make_pair(schema.domain, schema.name);
  schemas_[key] = std::move(schema);
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op) const {
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  auto it = schemas_.find({d, op});
  return it == schemas_.end() ? nullptr : &it->second;
}

const OpSchema& OpRegistry::require(const Node& node) const {
  const OpSchema* s = find(node.domain(), node.op_type());
  if (!s) throw UnsupportedOp(fmt(node.describe(), ": op is not supported by TrainRT"));
  return *s;
}

std::vector<const OpSchema*> OpRegistry::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& [key, s] : schemas_) out.push_back(&s);
  return out;
}

void infer_node(const OpSchema& schema, InferenceContext& ctx) {
  const Node& n = ctx.node();
  int given = n.num_inputs();
  while (given > 0 && n.input(given - 1) == nullptr) --given;  // trailing omitted optionals
  if (given < schema.min_inputs || given > schema.max_inputs)
    ctx.fail(fmt("has ", given, " inputs, expected ", schema.min_inputs,
                 schema.max_inputs == schema.min_inputs ? std::string()
                 : schema.max_inputs >= OpSchema::kVariadic ? " or more"
                                                             : fmt(" to ", schema.max_inputs)));
  if (n.num_outputs() < schema.min_outputs || n.num_outputs() > schema.max_outputs)
    ctx.fail(fmt("has ", n.num_outputs(), " outputs, expected ", schema.min_outputs, " to ",
                 schema.max_outputs));
  for (int i = 0; i < schema.min_inputs; ++i)
    if (!ctx.has_input(i)) ctx.fail(fmt("required input ", i, " is missing"));
  schema.infer(ctx);
}

std::vector<InferenceContext::Input> stored_inputs(const Node& node) {
  std::vector<InferenceContext::Input> inputs;
  for (const Value* v : node.inputs()) {
    InferenceContext::Input in;
    if (v) {
      if (v->dtype == DType::kUndefined)
        throw ShapeError(fmt(node.describe(), ": input '", v->name, "' has no known type"));
      in.dtype = v->dtype;
      in.shape = &v->shape;
      in.value = v->data.defined() ? &v->data : nullptr;
    }
    inputs.push_back(in);
  }
  return inputs;
}

void infer_and_store(Node& node) {
  InferenceContext ctx(node, stored_inputs(node));
  infer_node(OpRegistry::global().require(node), ctx);
  for (int i = 0; i < node.num_outputs(); ++i)
    if (Value* out = node.output(i)) {
      out->dtype = ctx.output(i).dtype;
      out->shape = ctx.output(i).shape;
    }
}

void infer_graph_shapes(Graph& graph) {
  // Values inference itself gives (Constant nodes, Shape of static dims) are passed on to the
  // nodes that read them, so that a Slice of a shape by constant bounds, as the exporters write,
  // keeps its length: a Reshape to that shape then keeps its rank, which gradient rules read.
  std::map<const Value*, Tensor> known;
  for (Node* node : graph.topological_order()) {
    std::vector<InferenceContext::Input> inputs = stored_inputs(*node);
    for (int i = 0; i < node->num_inputs(); ++i)
      if (auto it = known.find(node->input(i)); it != known.end() && !inputs[static_cast<size_t>(i)].value)
        inputs[static_cast<size_t>(i)].value = &it->second;
    const OpSchema& schema = OpRegistry::global().require(*node);
    InferenceContext ctx(*node, std::move(inputs));
    infer_node(schema, ctx);
    for (int i = 0; i < node->num_outputs(); ++i)
      if (Value* out = node->output(i)) {
        out->dtype = ctx.output(i).dtype;
        out->shape = ctx.output(i).shape;
        if (ctx.output(i).value.defined()) known[out] = ctx.output(i).value;
      }
    // A view op (OpSchema::is_view) of a known value has that value in its output's shape: the
    // exporters reshape constant axes (Hiera's ReduceMax over Reshape(Constant)), and the rank of
    // what reads them follows from the values.
    Value* out = node->output(0);
    Value* in = node->input(0);
    if (!schema.is_view || !out || !in || known.count(out) || !out->shape.is_static()) continue;
    const auto it = known.find(in);
    const Tensor* value = it != known.end() ? &it->second : in->is_initializer() ? &in->data : nullptr;
    if (value && value->numel() <= 4096 && value->numel() == *out->shape.numel())
      known[out] = value->reshaped(out->shape.concrete());
  }
}

}  // namespace trainrt
