// Gradient rules of the activations: fused TrainRT gradient ops where one kernel pass replaces
// several (ops/elementwise_grad_schemas.cc), plain ONNX ops for the rarer ones.
//
// After PyTorch's tools/autograd/derivatives.yaml and ONNX Runtime's gradient_builder.cc:
//   Relu         dX = ReluGrad(dY, Y)                          (threshold_backward)
//   LeakyRelu    dX = LeakyReluGrad(dY, Y, alpha); with alpha < 0, Y's sign is not X's: X instead
//   Sigmoid      dX = SigmoidGrad(dY, Y) = dY Y (1 - Y)
//   Tanh         dX = TanhGrad(dY, Y) = dY (1 - Y^2)
//   Gelu         dX = GeluGrad(dY, X, approximate)             (gelu_backward, both approximations)
//   Erf          dX = dY 2 / sqrt(pi) exp(-X^2)
//   Softplus     dX = dY sigmoid(X)
//   Elu          dX = dY where X > 0, else dY (Y + alpha)      (elu_backward: alpha e^X = Y + alpha)
//   Selu         dX = gamma dY where X > 0, else dY (Y + gamma alpha)
//   HardSigmoid  dX = alpha dY where 0 < Y < 1, else 0         (hardsigmoid_backward: open interval)
//   HardSwish    dX = 0 where X < -3, dY (X / 3 + 1/2) where X <= 3, else dY   (hardswish_backward)
// Elu and Selu test X > 0 as Y > 0 where the two agree (alpha >= 0, gamma > 0), so only Y needs
// to be kept for the backward.
#include <cmath>
#include <string>

#include "trainrt/autodiff/elementwise_gradients.h"
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"

namespace trainrt {
namespace {

// dX = op(dY, Y) with a fused TrainRT gradient op.
void fused_on_output(GradContext& ctx, const char* op) {
  ctx.set_input_grad(0, ctx.emit(op, {ctx.output_grad(0), ctx.output(0)}, {}, kTrainrtDomain));
}
void relu_grad(GradContext& ctx) { fused_on_output(ctx, "ReluGrad"); }
void sigmoid_grad(GradContext& ctx) { fused_on_output(ctx, "SigmoidGrad"); }
void tanh_grad(GradContext& ctx) { fused_on_output(ctx, "TanhGrad"); }

void leaky_relu_grad(GradContext& ctx) {
  const float alpha = ctx.node().attr_float("alpha", 0.01f);
  Value* v = alpha >= 0 ? ctx.output(0) : ctx.input(0);
  ctx.set_input_grad(0, ctx.emit("LeakyReluGrad", {ctx.output_grad(0), v}, {{"alpha", Attribute::of_float(alpha)}},
                                 kTrainrtDomain));
}

void gelu_grad(GradContext& ctx) {
  const std::string approximate = ctx.node().attr_string("approximate", "none");
  ctx.set_input_grad(0, ctx.emit("GeluGrad", {ctx.output_grad(0), ctx.input(0)},
                                 {{"approximate", Attribute::of_string(approximate)}}, kTrainrtDomain));
}

void erf_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* gauss = ctx.emit("Exp", {ctx.emit("Neg", {ctx.emit("Mul", {x, x})})});
  Value* slope = ctx.emit("Mul", {gauss, ctx.scalar_like(x, 2 / std::sqrt(M_PI))});
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), slope}));
}

void softplus_grad(GradContext& ctx) {
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Sigmoid", {ctx.input(0)})}));
}

// Where(X > 0, dY * positive_slope, dY * (Y + offset)): the gradient of Elu and Selu, whose
// negative branch c (e^X - 1) has the derivative c e^X = Y + c.
Value* exponential_unit_grad(GradContext& ctx, double positive_slope, double offset, bool y_sign_is_x_sign) {
  Value* dy = ctx.output_grad(0);
  Value* y = ctx.output(0);
  Value* v = y_sign_is_x_sign ? y : ctx.input(0);
  Value* positive = ctx.emit("Greater", {v, ctx.scalar_like(v, 0)});
  Value* pos = positive_slope == 1 ? dy : ctx.emit("Mul", {dy, ctx.scalar_like(dy, positive_slope)});
  Value* neg = ctx.emit("Mul", {dy, ctx.emit("Add", {y, ctx.scalar_like(y, offset)})});
  return ctx.emit("Where", {positive, pos, neg});
}

void elu_grad(GradContext& ctx) {
  const double alpha = ctx.node().attr_float("alpha", 1.f);
  ctx.set_input_grad(0, exponential_unit_grad(ctx, 1, alpha, alpha >= 0));
}

void selu_grad(GradContext& ctx) {
  // The defaults of the SELU paper, as float attributes (ONNX Selu).
  const double alpha = ctx.node().attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = ctx.node().attr_float("gamma", 1.05070102214813232421875f);
  ctx.set_input_grad(0, exponential_unit_grad(ctx, gamma, gamma * alpha, alpha >= 0 && gamma > 0));
}

void hard_sigmoid_grad(GradContext& ctx) {
  const double alpha = ctx.node().attr_float("alpha", 0.2f);
  Value* y = ctx.output(0);
  Value* dy = ctx.output_grad(0);
  Value* inside = ctx.emit("And", {ctx.emit("Greater", {y, ctx.scalar_like(y, 0)}),
                                   ctx.emit("Less", {y, ctx.scalar_like(y, 1)})});
  Value* g = ctx.emit("Mul", {dy, ctx.scalar_like(dy, alpha)});
  ctx.set_input_grad(0, ctx.emit("Where", {inside, g, ctx.scalar_like(dy, 0)}));
}

void hard_swish_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  Value* slope = ctx.emit("Add", {ctx.emit("Mul", {x, ctx.scalar_like(x, 1.0 / 3.0)}), ctx.scalar_like(x, 0.5)});
  Value* middle = ctx.emit("Where", {ctx.emit("LessOrEqual", {x, ctx.scalar_like(x, 3)}), ctx.emit("Mul", {dy, slope}), dy});
  ctx.set_input_grad(0, ctx.emit("Where", {ctx.emit("Less", {x, ctx.scalar_like(x, -3)}), ctx.scalar_like(dy, 0), middle}));
}

}  // namespace

void register_activation_gradients(GradientRegistry& r) {
  r.add("", "Relu", relu_grad);
  r.add("", "LeakyRelu", leaky_relu_grad);
  r.add("", "Sigmoid", sigmoid_grad);
  r.add("", "Tanh", tanh_grad);
  r.add("", "Gelu", gelu_grad);
  r.add("", "Erf", erf_grad);
  r.add("", "Softplus", softplus_grad);
  r.add("", "Elu", elu_grad);
  r.add("", "Selu", selu_grad);
  r.add("", "HardSigmoid", hard_sigmoid_grad);
  r.add("", "HardSwish", hard_swish_grad);
}

}  // namespace trainrt
