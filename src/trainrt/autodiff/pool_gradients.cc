// Gradient rules of the pooling ops; each emits one TrainRT-domain gradient op with the forward
// node's attributes (kernels in kernels/cpu/pool_kernels.cc):
//   MaxPool, GlobalMaxPool          dX = MaxPoolGrad(dY, X): dY goes to the first largest tap of
//                                   its window, found again in X (PyTorch max_pool2d_with_indices
//                                   backward, without keeping the indices alive; when X is a
//                                   ReLU output kept only for this, plan/saved_values.h rule 5
//                                   keeps a u8 argmax instead: MaxPoolArgmaxGrad)
//   AveragePool, GlobalAveragePool  dX = AveragePoolGrad(dY, Shape(X)): dY / count to every tap
// The global pools' gradient ops carry no kernel_shape: their window is the whole plane. A
// gradient flowing into MaxPool's Indices output is not supported (it is integer).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"

namespace trainrt {
namespace {

// The forward node's pooling attributes (none for the global pools).
std::map<std::string, Attribute> pool_attrs(const Node& n) {
  std::map<std::string, Attribute> attrs;
  for (const char* name : {"kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode",
                           "count_include_pad"})
    if (const Attribute* a = n.attr(name)) attrs[name] = *a;
  return attrs;
}

void max_pool_grad(GradContext& ctx) {
  Value* dx = ctx.emit("MaxPoolGrad", {ctx.output_grad(0), ctx.input(0)}, pool_attrs(ctx.node()), kTrainrtDomain);
  ctx.set_input_grad(0, dx);
}

void average_pool_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dx = ctx.emit("AveragePoolGrad", {ctx.output_grad(0), ctx.shape_of(x)}, pool_attrs(ctx.node()),
                       kTrainrtDomain);
  dx->shape = x->shape;  // inference cannot see through Shape(X) when X has symbolic dims
  ctx.set_input_grad(0, dx);
}

}  // namespace

void register_pool_gradients(GradientRegistry& r) {
  r.add("", "MaxPool", max_pool_grad);
  r.add("", "GlobalMaxPool", max_pool_grad);
  r.add("", "AveragePool", average_pool_grad);
  r.add("", "GlobalAveragePool", average_pool_grad);
}

}  // namespace trainrt
