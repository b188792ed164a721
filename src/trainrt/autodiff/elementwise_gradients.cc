// Gradient rules of the elementwise arithmetic ops, Where, Clip and the casts; the ops of the
// family whose outputs carry no gradient; and the registration of the whole family (the
// activations: activation_gradients.cc, see elementwise_gradients.h).
//
// The math follows PyTorch's tools/autograd/derivatives.yaml (and ONNX Runtime's
// orttraining/core/graph/gradient_builder.cc). With dY the gradient of Y:
//   Add, Sub         dA = dY, dB = +-dY
//   Mul              dA = dY B, dB = dY A
//   Div              dA = dY / B, dB = -(dY / B) A / B                  (div_tensor_other_backward)
//   Pow              dX = dY E X^(E-1), 0 where E == 0                  (pow_backward)
//                    dE = dY Y log(X), 0 where X == 0 and E >= 0        (pow_backward_exponent:
//                    NaN where X < 0, as torch)
//   Neg, Abs         dX = -dY, dY sign(X)
//   Exp, Log         dX = dY Y, dY / X
//   Sqrt             dX = dY / (2 Y)
//   Sin, Cos         dX = dY cos(X), -dY sin(X)
//   Reciprocal       dX = -dY Y^2
//   Sum, Mean        dXi = dY, dY / n
//   Max, Min         dXi = dY [Xi == Y] / (number of inputs equal to Y): the selected input takes
//                    dY, ties share it evenly (dY / 2 each of two, as torch.maximum / minimum;
//                    dY / k for k, as torch.amax)
//   Where(C, A, B)   dA = dY where C, dB = dY where not C; C gets none
//   Clip(X, lo, hi)  dX = dY where lo <= X <= hi (boundaries included), dlo = dY where X < lo
//                    (and lo < hi), dhi = dY where X > hi (or hi < lo)  (clamp_backward_min_max);
//                    Clip-6's attribute bounds are constants
//   Identity         dX = dY
//   Cast, CastLike   dX = dY cast back to X's float dtype (integer X: no gradient)
// Every gradient of a broadcast input is summed back to the input's shape (reduce_to_shape_of).
// Only the inputs that need a gradient get one, and integer inputs never do.
#include <optional>

#include "trainrt/autodiff/elementwise_gradients.h"
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"

namespace trainrt {
namespace {

// Sets input i's gradient to `grad` (of Y's shape) summed back over the axes it was broadcast along.
void set_broadcast_grad(GradContext& ctx, int i, Value* grad) {
  if (ctx.needs_input_grad(i)) ctx.set_input_grad(i, ctx.reduce_to_shape_of(grad, ctx.input(i)));
}

// v as dtype t (v itself when it has t already).
Value* cast_to(GradContext& ctx, Value* v, DType t) {
  if (v->dtype == t) return v;
  return ctx.emit("Cast", {v}, {{"to", Attribute::of_int(dtype_to_onnx(t))}});
}

// dY where mask, else 0.
Value* masked(GradContext& ctx, Value* mask, Value* dy) {
  return ctx.emit("Where", {mask, dy, ctx.scalar_like(dy, 0)});
}

void identity_grad(GradContext& ctx) { ctx.set_input_grad(0, ctx.output_grad(0)); }

void add_grad(GradContext& ctx) {
  for (int i = 0; i < 2; ++i) set_broadcast_grad(ctx, i, ctx.output_grad(0));
}

void sub_grad(GradContext& ctx) {
  set_broadcast_grad(ctx, 0, ctx.output_grad(0));
  if (ctx.needs_input_grad(1))  // negated after the sum: fewer elements
    ctx.set_input_grad(1, ctx.emit("Neg", {ctx.reduce_to_shape_of(ctx.output_grad(0), ctx.input(1))}));
}

void mul_grad(GradContext& ctx) {
  Value* dy = ctx.output_grad(0);
  for (int i = 0; i < 2; ++i)
    if (ctx.needs_input_grad(i)) set_broadcast_grad(ctx, i, ctx.emit("Mul", {dy, ctx.input(1 - i)}));
}

void div_grad(GradContext& ctx) {
  Value* a = ctx.input(0);
  Value* b = ctx.input(1);
  Value* dy_over_b = ctx.emit("Div", {ctx.output_grad(0), b});
  set_broadcast_grad(ctx, 0, dy_over_b);
  if (ctx.needs_input_grad(1)) {
    Value* g = ctx.emit("Div", {ctx.emit("Mul", {dy_over_b, a}), b});
    ctx.set_input_grad(1, ctx.emit("Neg", {ctx.reduce_to_shape_of(g, b)}));
  }
}

// Mod: a - q b with q = trunc(a / b) (fmod 1) or floor(a / b) (fmod 0), piecewise constant:
// dA = dY, dB = -q dY (torch's fmod and remainder backward).
void mod_grad(GradContext& ctx) {
  Value* a = ctx.input(0);
  Value* b = ctx.input(1);
  set_broadcast_grad(ctx, 0, ctx.output_grad(0));
  if (ctx.needs_input_grad(1)) {
    Value* ratio = ctx.emit("Div", {a, b});
    Value* q = ctx.node().attr_int("fmod", 0) != 0
                   ? ctx.emit("Mul", {ctx.emit("Sign", {ratio}), ctx.emit("Floor", {ctx.emit("Abs", {ratio})})})
                   : ctx.emit("Floor", {ratio});
    ctx.set_input_grad(1, ctx.emit("Neg", {ctx.reduce_to_shape_of(ctx.emit("Mul", {ctx.output_grad(0), q}), b)}));
  }
}

// The exponent's value when Pow's exponent is one number fixed for the graph's lifetime: an
// initializer that is not trained here and is no graph input (whose default a caller could
// override). Then dX takes a cheaper form (x^2 in norms and losses: dX = 2 X dY).
std::optional<double> constant_exponent(GradContext& ctx) {
  Value* e = ctx.input(1);
  if (!e->is_initializer() || e->data.numel() != 1 || ctx.needs_input_grad(1)) return std::nullopt;
  for (const Value* in : ctx.graph().inputs())
    if (in == e) return std::nullopt;
  return e->data.to_double(0);
}

// dX = dY e X^(e-1) for a constant scalar e (none for e == 0: Y does not depend on X).
void pow_base_grad_constant(GradContext& ctx, double e) {
  Value* x = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  if (e == 0) return;
  Value* slope = nullptr;  // e X^(e-1)
  if (e == 2) {
    slope = ctx.emit("Mul", {x, ctx.scalar_like(x, 2)});
  } else if (e != 1) {
    Value* power = ctx.emit("Pow", {x, ctx.scalar_like(ctx.input(1), e - 1)});
    slope = ctx.emit("Mul", {power, ctx.scalar_like(x, e)});
  }
  set_broadcast_grad(ctx, 0, slope ? ctx.emit("Mul", {dy, slope}) : dy);
}

void pow_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* e = ctx.input(1);
  Value* dy = ctx.output_grad(0);
  const std::optional<double> constant = ctx.needs_input_grad(0) ? constant_exponent(ctx) : std::nullopt;
  if (constant) pow_base_grad_constant(ctx, *constant);
  const bool general_base = ctx.needs_input_grad(0) && !constant;
  if (!general_base && !ctx.needs_input_grad(1)) return;
  Value* ex = cast_to(ctx, e, x->dtype);  // Pow-12+ allows another exponent dtype
  if (general_base) {
    Value* slope = ctx.emit("Pow", {x, ctx.emit("Sub", {ex, ctx.scalar_like(ex, 1)})});
    Value* g = ctx.emit("Mul", {ctx.emit("Mul", {dy, ex}), slope});
    // 0 where E == 0, where X^(E-1) may be inf at X == 0.
    Value* e_zero = ctx.emit("Equal", {ex, ctx.scalar_like(ex, 0)});
    set_broadcast_grad(ctx, 0, ctx.emit("Where", {e_zero, ctx.scalar_like(g, 0), g}));
  }
  if (ctx.needs_input_grad(1)) {
    Value* g = ctx.emit("Mul", {ctx.emit("Mul", {dy, ctx.output(0)}), ctx.emit("Log", {x})});
    // 0 where X == 0 and E >= 0 (Y log X is 0 * -inf there).
    Value* zero_base = ctx.emit("And", {ctx.emit("Equal", {x, ctx.scalar_like(x, 0)}),
                                        ctx.emit("GreaterOrEqual", {ex, ctx.scalar_like(ex, 0)})});
    g = ctx.emit("Where", {zero_base, ctx.scalar_like(g, 0), g});
    ctx.set_input_grad(1, cast_to(ctx, ctx.reduce_to_shape_of(g, e), e->dtype));
  }
}

void neg_grad(GradContext& ctx) { ctx.set_input_grad(0, ctx.emit("Neg", {ctx.output_grad(0)})); }

void abs_grad(GradContext& ctx) {
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Sign", {ctx.input(0)})}));
}

void exp_grad(GradContext& ctx) { ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.output(0)})); }

void log_grad(GradContext& ctx) { ctx.set_input_grad(0, ctx.emit("Div", {ctx.output_grad(0), ctx.input(0)})); }

void sin_grad(GradContext& ctx) {
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Cos", {ctx.input(0)})}));
}

void cos_grad(GradContext& ctx) {
  Value* g = ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Sin", {ctx.input(0)})});
  ctx.set_input_grad(0, ctx.emit("Neg", {g}));
}

// The inverse and hyperbolic functions (dX = dY f'(X)):
//   tan 1 + y^2, asin 1 / sqrt(1 - x^2), acos -1 / sqrt(1 - x^2), atan 1 / (1 + x^2),
//   sinh cosh x, cosh sinh x, asinh 1 / sqrt(x^2 + 1), acosh 1 / sqrt(x^2 - 1), atanh 1 / (1 - x^2).
void tan_grad(GradContext& ctx) {
  Value* y = ctx.output(0);
  Value* d = ctx.emit("Add", {ctx.scalar_like(y, 1), ctx.emit("Mul", {y, y})});
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), d}));
}

// dY / d with d = 1 - x^2 (one_minus) or 1 + x^2, square-rooted or not, the result negated or not.
void over_square_grad(GradContext& ctx, bool one_minus, bool root, bool negate) {
  Value* x = ctx.input(0);
  Value* sq = ctx.emit("Mul", {x, x});
  Value* d = ctx.emit(one_minus ? "Sub" : "Add", {ctx.scalar_like(x, 1), sq});
  if (root) d = ctx.emit("Sqrt", {d});
  Value* g = ctx.emit("Div", {ctx.output_grad(0), d});
  ctx.set_input_grad(0, negate ? ctx.emit("Neg", {g}) : g);
}

void asin_grad(GradContext& ctx) { over_square_grad(ctx, true, true, false); }
void acos_grad(GradContext& ctx) { over_square_grad(ctx, true, true, true); }
void atan_grad(GradContext& ctx) { over_square_grad(ctx, false, false, false); }
void asinh_grad(GradContext& ctx) { over_square_grad(ctx, false, true, false); }
void atanh_grad(GradContext& ctx) { over_square_grad(ctx, true, false, false); }
void acosh_grad(GradContext& ctx) {  // 1 / sqrt(x^2 - 1)
  Value* x = ctx.input(0);
  Value* d = ctx.emit("Sqrt", {ctx.emit("Sub", {ctx.emit("Mul", {x, x}), ctx.scalar_like(x, 1)})});
  ctx.set_input_grad(0, ctx.emit("Div", {ctx.output_grad(0), d}));
}
void sinh_grad(GradContext& ctx) {
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Cosh", {ctx.input(0)})}));
}
void cosh_grad(GradContext& ctx) {
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Sinh", {ctx.input(0)})}));
}

void sqrt_grad(GradContext& ctx) {
  Value* y = ctx.output(0);
  ctx.set_input_grad(0, ctx.emit("Div", {ctx.output_grad(0), ctx.emit("Mul", {y, ctx.scalar_like(y, 2)})}));
}

void reciprocal_grad(GradContext& ctx) {
  Value* y = ctx.output(0);
  Value* g = ctx.emit("Mul", {ctx.output_grad(0), ctx.emit("Mul", {y, y})});
  ctx.set_input_grad(0, ctx.emit("Neg", {g}));
}

void sum_grad(GradContext& ctx) {
  for (int i = 0; i < ctx.node().num_inputs(); ++i) set_broadcast_grad(ctx, i, ctx.output_grad(0));
}

void mean_grad(GradContext& ctx) {
  Value* dy = ctx.output_grad(0);
  const int n = ctx.node().num_inputs();
  Value* share = n == 1 ? dy : ctx.emit("Mul", {dy, ctx.scalar_like(dy, 1.0 / n)});
  for (int i = 0; i < n; ++i) set_broadcast_grad(ctx, i, share);
}

// Max / Min: input i takes dY [Xi == Y] / count, count = the number of inputs equal to Y there.
void max_min_grad(GradContext& ctx) {
  const int n = ctx.node().num_inputs();
  Value* dy = ctx.output_grad(0);
  if (n == 1) {
    ctx.set_input_grad(0, dy);
    return;
  }
  std::vector<Value*> selected;  // [Xi == Y] as dY's dtype, each of Y's shape
  for (int i = 0; i < n; ++i)
    selected.push_back(cast_to(ctx, ctx.emit("Equal", {ctx.input(i), ctx.output(0)}), dy->dtype));
  Value* count = n == 2 ? ctx.emit("Add", selected) : ctx.emit("Sum", selected);
  Value* share = ctx.emit("Div", {dy, count});
  for (int i = 0; i < n; ++i)
    if (ctx.needs_input_grad(i)) set_broadcast_grad(ctx, i, ctx.emit("Mul", {share, selected[static_cast<size_t>(i)]}));
}

void where_grad(GradContext& ctx) {
  Value* c = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  if (ctx.needs_input_grad(1)) set_broadcast_grad(ctx, 1, masked(ctx, c, dy));
  if (ctx.needs_input_grad(2)) set_broadcast_grad(ctx, 2, ctx.emit("Where", {c, ctx.scalar_like(dy, 0), dy}));
}

// mask_a and mask_b when both are given, else the one that is.
Value* both(GradContext& ctx, Value* mask_a, Value* mask_b) {
  if (!mask_a || !mask_b) return mask_a ? mask_a : mask_b;
  return ctx.emit("And", {mask_a, mask_b});
}

void clip_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  Value* x = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  Value* lo = n.input(1);
  Value* hi = n.input(2);
  if (n.opset() < 11) {  // Clip-6: bounds are attributes
    lo = n.has_attr("min") ? ctx.scalar_like(x, n.attr_float("min", 0.f)) : nullptr;
    hi = n.has_attr("max") ? ctx.scalar_like(x, n.attr_float("max", 0.f)) : nullptr;
  }
  if (ctx.needs_input_grad(0)) {
    Value* inside = both(ctx, lo ? ctx.emit("GreaterOrEqual", {x, lo}) : nullptr,
                         hi ? ctx.emit("LessOrEqual", {x, hi}) : nullptr);
    ctx.set_input_grad(0, inside ? masked(ctx, inside, dy) : dy);
  }
  if (ctx.needs_input_grad(1)) {
    Value* below = both(ctx, ctx.emit("Less", {x, lo}), hi ? ctx.emit("Less", {lo, hi}) : nullptr);
    set_broadcast_grad(ctx, 1, masked(ctx, below, dy));
  }
  if (ctx.needs_input_grad(2)) {
    Value* above = ctx.emit("Greater", {x, hi});
    if (lo) above = ctx.emit("Or", {above, ctx.emit("Less", {hi, lo})});
    set_broadcast_grad(ctx, 2, masked(ctx, above, dy));
  }
}

// Cast and CastLike: the gradient goes back to input 0's dtype (the builder never asks for an
// integer input's gradient); CastLike's second input gives only a dtype.
void cast_grad(GradContext& ctx) {
  if (ctx.needs_input_grad(0)) ctx.set_input_grad(0, cast_to(ctx, ctx.output_grad(0), ctx.input(0)->dtype));
}

}  // namespace

void register_elementwise_gradients(GradientRegistry& r) {
  r.add("", "Add", add_grad);
  r.add("", "Sub", sub_grad);
  r.add("", "Mul", mul_grad);
  r.add("", "Div", div_grad);
  r.add("", "Mod", mod_grad);
  r.add("", "Pow", pow_grad);
  r.add("", "Neg", neg_grad);
  r.add("", "Abs", abs_grad);
  r.add("", "Exp", exp_grad);
  r.add("", "Log", log_grad);
  r.add("", "Sqrt", sqrt_grad);
  r.add("", "Sin", sin_grad);
  r.add("", "Cos", cos_grad);
  r.add("", "Tan", tan_grad);
  r.add("", "Asin", asin_grad);
  r.add("", "Acos", acos_grad);
  r.add("", "Atan", atan_grad);
  r.add("", "Sinh", sinh_grad);
  r.add("", "Cosh", cosh_grad);
  r.add("", "Asinh", asinh_grad);
  r.add("", "Acosh", acosh_grad);
  r.add("", "Atanh", atanh_grad);
  r.add("", "Reciprocal", reciprocal_grad);
  r.add("", "Sum", sum_grad);
  r.add("", "Mean", mean_grad);
  r.add("", "Max", max_min_grad);
  r.add("", "Min", max_min_grad);
  r.add("", "Where", where_grad);
  r.add("", "Clip", clip_grad);
  r.add("", "Identity", identity_grad);
  r.add("", "Cast", cast_grad);
  r.add("", "CastLike", cast_grad);
  // Piecewise constant (zero gradient almost everywhere, as torch gives for floor / ceil / sign)
  // or with bool outputs: the builder skips them, and a value reached only through them gets a
  // zero gradient.
  for (const char* op : {"Floor", "Ceil", "Round", "Sign", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                         "Not", "And", "Or", "Xor"})
    r.add_non_differentiable("", op);
  register_activation_gradients(r);
}

}  // namespace trainrt
