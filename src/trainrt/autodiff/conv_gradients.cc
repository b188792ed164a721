// Gradient rule of Conv: one fused TrainRT op, ConvGrad(dY, X, W) -> (dX, dW, dB), with the
// forward node's attributes (strides, pads, auto_pad, dilations, group, kernel_shape), asking
// only for the gradients the backward needs (a frozen weight or the model input gets none).
// dX is the transposed convolution of dY with W, dW the correlation of X with dY, dB the sum of
// dY over the batch and spatial dims (PyTorch convolution_backward; ONNX Runtime ConvGrad).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"

namespace trainrt {
namespace {

void conv_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const bool has_bias = ctx.input(2) != nullptr;
  const std::vector<bool> wanted{ctx.needs_input_grad(0), ctx.needs_input_grad(1),
                                 has_bias && ctx.needs_input_grad(2)};
  const std::vector<Value*> g = ctx.emit_multi("ConvGrad", {ctx.output_grad(0), ctx.input(0), ctx.input(1)}, 3,
                                               n.attrs(), kTrainrtDomain, wanted);
  for (int i = 0; i < 3; ++i)
    if (g[static_cast<size_t>(i)]) ctx.set_input_grad(i, g[static_cast<size_t>(i)]);
}

}  // namespace

void register_conv_gradients(GradientRegistry& r) { r.add("", "Conv", conv_grad); }

}  // namespace trainrt
