#include "trainrt/kernels/cpu/node_runner.h"

#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {

std::vector<Tensor> run_node(const NodeSpec& spec, const std::vector<Tensor>& inputs,
                             const KernelTable& table) {
  Graph g;
  g.set_opset(spec.domain, spec.opset);
  if (!spec.domain.empty()) g.set_opset("", spec.opset);
  std::vector<Value*> in_values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      in_values.push_back(nullptr);
      continue;
    }
    in_values.push_back(g.add_initializer("in" + std::to_string(i), inputs[i]));
  }
  std::vector<std::string> out_names;
  for (int i = 0; i < spec.num_outputs; ++i) out_names.push_back("out" + std::to_string(i));
  Node* node = g.add_node(spec.op, in_values, out_names, spec.domain, "node");
  for (const auto& [name, a] : spec.attrs) node->set_attr(name, a);

  const OpSchema& schema = OpRegistry::global().require(*node);
  std::vector<InferenceContext::Input> infer_inputs;
  for (Value* v : in_values) {
    InferenceContext::Input in;
    if (v) {
      in.dtype = v->dtype;
      in.shape = &v->shape;
      in.value = &v->data;
    }
    infer_inputs.push_back(in);
  }
  InferenceContext ctx(*node, std::move(infer_inputs));
  infer_node(schema, ctx);

  std::vector<Tensor> outputs(static_cast<size_t>(spec.num_outputs));
  std::vector<Tensor*> out_ptrs;
  for (int i = 0; i < spec.num_outputs; ++i) {
    const auto& o = ctx.output(i);
    Value* v = node->output(i);
    v->dtype = o.dtype;
    v->shape = o.shape;
    if (!o.shape.is_static())
      throw ShapeError(fmt(node->describe(), ": output ", i, " has non-static shape ", to_string(o.shape)));
    outputs[static_cast<size_t>(i)] = Tensor::empty(o.dtype, o.shape.concrete());
    out_ptrs.push_back(&outputs[static_cast<size_t>(i)]);
  }
  std::vector<const Tensor*> in_ptrs;
  for (Value* v : in_values) in_ptrs.push_back(v ? &v->data : nullptr);

  KernelFn kernel = table.create(*node);
  KernelContext kctx;
  kctx.inputs = in_ptrs;
  kctx.outputs = out_ptrs;
  kctx.random_seed = spec.random_seed;
  kernel(kctx);
  return outputs;
}

std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::map<std::string, Attribute>& attrs, int num_outputs) {
  NodeSpec spec;
  spec.op = op;
  spec.attrs = attrs;
  spec.num_outputs = num_outputs;
  return run_node(spec, inputs, cpu_kernel_table());
}

}  // namespace trainrt
