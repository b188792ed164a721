// The gradient of PythonOp is the user's own backward: one PythonOpGrad node that hands the
// Function's ctx (the handle PythonOp wrote) and the outputs' gradients back to Python
// (ops/python_op_schemas.cc). Only the inputs that need a gradient get an output and a shape: those
// the graph differentiates that the Function also differentiates (input_requires_grad; a tensor
// inside a list argument is an input of the node but, as in eager, not of the Function's autograd).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/dtype.h"

namespace trainrt {
namespace {

void python_op_grad(GradContext& ctx) {
  const Node& node = ctx.node();
  const int num_grads = node.num_outputs() - 1;
  std::vector<Value*> inputs{ctx.output(0)};
  bool any = false;
  for (int j = 1; j <= num_grads; ++j) {
    inputs.push_back(ctx.output_grad(j));
    any = any || ctx.output_grad(j);
  }
  if (!any) return;  // no gradient reaches an output: the inputs' stay unset (zero)
  const std::vector<int64_t> differentiable = node.attr_ints("input_requires_grad", {});
  std::vector<bool> wanted;
  std::vector<int64_t> dtypes;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const size_t k = static_cast<size_t>(i);
    wanted.push_back(ctx.needs_input_grad(i) && (k >= differentiable.size() || differentiable[k] != 0));
    inputs.push_back(wanted.back() ? ctx.shape_of(ctx.input(i)) : nullptr);
    dtypes.push_back(dtype_to_onnx(ctx.input(i)->dtype));
  }
  std::map<std::string, Attribute> attrs{{"function", Attribute::of_string(node.attr_string("function", ""))},
                                         {"num_output_grads", Attribute::of_int(num_grads)},
                                         {"input_dtypes", Attribute::of_ints(dtypes)}};
  std::vector<Value*> grads =
      ctx.emit_multi("PythonOpGrad", inputs, node.num_inputs(), attrs, kTrainrtDomain, wanted);
  for (int i = 0; i < node.num_inputs(); ++i)
    if (wanted[static_cast<size_t>(i)]) ctx.set_input_grad(i, grads[static_cast<size_t>(i)]);
}

}  // namespace

void register_python_op_gradients(GradientRegistry& r) { r.add(kTrainrtDomain, "PythonOp", python_op_grad); }

}  // namespace trainrt
