// Gradient rules of Softmax, LogSoftmax, LayerNormalization, BatchNormalization and
// InstanceNormalization: each emits one fused TrainRT op.
//
// Softmax / LogSoftmax: dX = SoftmaxGrad(dY, Y) / LogSoftmaxGrad(dY, Y) along the node's axis
//   (PyTorch _softmax_backward_data; ONNX Runtime SoftmaxGrad). Before opset 13 the forward
//   normalizes X coerced to 2-D at `axis` (default 1); dY and Y are flattened the same way, the
//   gradient taken along the last axis and reshaped back.
// LayerNormalization: (dX, dScale, dBias) = LayerNormalizationGrad(dY, X, scale, [mean, inv_std])
//   (PyTorch native_layer_norm_backward; ONNX Runtime LayerNormalizationGrad). The node's Mean and
//   InvStdDev outputs are optional: when it has both and they are of X's type, the kernel reads
//   them; otherwise (not produced, or a stash type coarser than X such as f32 for f64 X) the
//   kernel recomputes them from X, bit for bit as the forward kernel does. That keeps the forward
//   node untouched, and costs two passes over rows the backward has in cache anyway. dScale and
//   dBias come out in the normalized shape and are summed to the scale's and bias's own shapes.
//   Gradients flowing into Mean or InvStdDev are not supported (UnsupportedOp naming the node).
// InstanceNormalization: (dX, dScale, dB) = InstanceNormalizationGrad(dY, X, scale), the plane
//   statistics taken from X again (kernels/cpu/instance_norm_kernels.cc has the formulas).
// BatchNormalization: (dX, dScale, dBias) = BatchNormalizationGrad(dY, X, scale, [mean, inv_std])
//   (PyTorch batch_norm_backward). In training mode the kernel takes the batch statistics from X
//   again (ONNX's node has no saved-statistics outputs) and the running stats get no gradient
//   (Y does not depend on them). In eval mode Y = (X - mean) * scale * inv_std + B is affine in X
//   with inv_std = 1 / sqrt(input_var + epsilon) made here; the running stats' gradients follow
//   from the same sums: d mean = -dBias * scale * inv_std, d var = -dScale * scale * inv_std^2 / 2.
//   Gradients flowing into the running_mean / running_var outputs are not supported.
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/reduction_gradients.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"

namespace trainrt {
namespace {

Attribute int_attr(int64_t v) { return Attribute::of_int(v); }

void softmax_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const std::string grad_op = n.op_type() + "Grad";  // SoftmaxGrad, LogSoftmaxGrad
  Value* dy = ctx.output_grad(0);
  Value* y = ctx.output(0);
  if (n.opset() >= 13) {
    ctx.set_input_grad(0, ctx.emit(grad_op, {dy, y}, {{"axis", int_attr(n.attr_int("axis", -1))}}, kTrainrtDomain));
    return;
  }
  const std::map<std::string, Attribute> flatten{{"axis", int_attr(n.attr_int("axis", 1))}};
  Value* dy2 = ctx.emit("Flatten", {dy}, flatten);
  Value* y2 = ctx.emit("Flatten", {y}, flatten);
  Value* dx2 = ctx.emit(grad_op, {dy2, y2}, {{"axis", int_attr(-1)}}, kTrainrtDomain);
  Value* dx = ctx.emit("Reshape", {dx2, ctx.shape_of(dy)});
  dx->shape = ctx.input(0)->shape;
  ctx.set_input_grad(0, dx);
}

// The scale's (or bias's) gradient from the kernel's (normalized-shape) one. A parameter of
// higher rank than the normalized dims has leading 1s; they are put back before summing.
Value* to_param_shape(GradContext& ctx, Value* grad, Value* param, int64_t axis) {
  const Shape& x = ctx.input(0)->shape;
  const Shape& p = param->shape;
  if (x.rank_known && p.rank_known) {
    const int64_t extra = p.rank() - (x.rank() - (axis < 0 ? axis + x.rank() : axis));
    if (extra > 0) {
      std::vector<int64_t> leading;
      for (int64_t i = 0; i < extra; ++i) {
        const Dim& d = p.dims[static_cast<size_t>(i)];
        if (!(d.is_static() && d.value == 1))
          throw UnsupportedOp(fmt(ctx.node().describe(), ": input of shape ", to_string(p),
                                  " varies across the normalized rows of input 0 of shape ", to_string(x),
                                  "; its gradient is only supported when it broadcasts to the normalized dims"));
        leading.push_back(i);
      }
      grad = ctx.emit("Unsqueeze", {grad, ctx.const_i64(leading)});
    }
  }
  return ctx.reduce_to_shape_of(grad, param);
}

void layer_norm_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  if (ctx.output_grad(1) || ctx.output_grad(2))
    throw UnsupportedOp(fmt(n.describe(), ": gradients flowing into outputs Mean or InvStdDev are not supported"));
  Value* x = ctx.input(0);
  Value* scale = ctx.input(1);
  Value* bias = ctx.input(2);
  const int64_t axis = n.attr_int("axis", -1);
  std::vector<Value*> inputs{ctx.output_grad(0), x, scale};
  Value* mean = ctx.output(1);
  Value* inv_std = ctx.output(2);
  if (mean && inv_std && mean->dtype == x->dtype && inv_std->dtype == x->dtype) {
    inputs.push_back(mean);
    inputs.push_back(inv_std);
  }
  const std::vector<bool> wanted{ctx.needs_input_grad(0), ctx.needs_input_grad(1),
                                 bias && ctx.needs_input_grad(2)};
  std::vector<Value*> g = ctx.emit_multi(
      "LayerNormalizationGrad", inputs, 3,
      {{"axis", int_attr(axis)}, {"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))}}, kTrainrtDomain,
      wanted);
  ctx.set_input_grad(0, g[0]);
  if (g[1]) ctx.set_input_grad(1, to_param_shape(ctx, g[1], scale, axis));
  if (g[2]) ctx.set_input_grad(2, to_param_shape(ctx, g[2], bias, axis));
}

// dX, dScale, dB = InstanceNormalizationGrad(dY, X, scale): the plane statistics recomputed from X.
void instance_norm_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const std::vector<bool> wanted{ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2)};
  std::vector<Value*> g = ctx.emit_multi("InstanceNormalizationGrad", {ctx.output_grad(0), ctx.input(0), ctx.input(1)},
                                         3, {{"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))}},
                                         kTrainrtDomain, wanted);
  for (int i = 0; i < 3; ++i)
    if (g[static_cast<size_t>(i)]) ctx.set_input_grad(i, g[static_cast<size_t>(i)]);
}

void batch_norm_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  if (ctx.output_grad(1) || ctx.output_grad(2))
    throw UnsupportedOp(fmt(n.describe(), ": gradients flowing into outputs running_mean or running_var are not "
                                          "supported"));
  const bool training = n.attr_int("training_mode", 0) != 0;
  const float epsilon = n.attr_float("epsilon", 1e-5f);
  Value* scale = ctx.input(1);
  std::vector<Value*> inputs{ctx.output_grad(0), ctx.input(0), scale};
  Value* inv_std = nullptr;
  if (!training) {
    Value* var = ctx.input(4);
    inv_std = ctx.emit("Reciprocal", {ctx.emit("Sqrt", {ctx.emit("Add", {var, ctx.scalar_like(var, epsilon)})})});
    inputs.push_back(ctx.input(3));
    inputs.push_back(inv_std);
  }
  const bool mean_grad = !training && ctx.needs_input_grad(3);
  const bool var_grad = !training && ctx.needs_input_grad(4);
  const std::vector<bool> wanted{ctx.needs_input_grad(0), ctx.needs_input_grad(1) || var_grad,
                                 ctx.needs_input_grad(2) || mean_grad};
  std::vector<Value*> g = ctx.emit_multi(
      "BatchNormalizationGrad", inputs, 3,
      {{"epsilon", Attribute::of_float(epsilon)}, {"training_mode", int_attr(training ? 1 : 0)}}, kTrainrtDomain,
      wanted);
  if (ctx.needs_input_grad(0)) ctx.set_input_grad(0, g[0]);
  if (ctx.needs_input_grad(1)) ctx.set_input_grad(1, g[1]);
  if (ctx.needs_input_grad(2)) ctx.set_input_grad(2, g[2]);
  if (mean_grad) {
    Value* per_unit = ctx.emit("Mul", {scale, inv_std});
    ctx.set_input_grad(3, ctx.emit("Neg", {ctx.emit("Mul", {g[2], per_unit})}));
  }
  if (var_grad) {
    Value* per_unit = ctx.emit("Mul", {ctx.emit("Mul", {scale, inv_std}), inv_std});
    Value* half = ctx.scalar_like(scale, -0.5);
    ctx.set_input_grad(4, ctx.emit("Mul", {ctx.emit("Mul", {g[1], per_unit}), half}));
  }
}

}  // namespace

void register_normalization_gradients(GradientRegistry& r) {
  r.add("", "Softmax", softmax_grad);
  r.add("", "LogSoftmax", softmax_grad);
  r.add("", "LayerNormalization", layer_norm_grad);
  r.add("", "BatchNormalization", batch_norm_grad);
  r.add("", "InstanceNormalization", instance_norm_grad);
}

}  // namespace trainrt
