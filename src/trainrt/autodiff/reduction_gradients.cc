// Gradient rules of the Reduce* ops (ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL1,
// ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp), and the registration of the whole
// reduction family (the others: reduction_gradients.h).
//
// Y = reduce(X) over axes A. dYk and Yk are dY and Y with the reduced axes restored as 1s
// (Unsqueeze when keepdims=0), so they broadcast against X (PyTorch's restore_reduced_dims):
//   ReduceSum        dX = Expand(dYk, Shape(X))
//   ReduceMean       dX = Expand(dYk / N, Shape(X)),  N = Size(X) / Size(Y) (static when known)
//   ReduceMax/Min    dX = mask * dYk / sum_A(mask),  mask = (X == Yk): ties share the gradient
//                    evenly (PyTorch amax/amin backward, scale_grad_by_count)
//   ReduceL1         dX = Sign(X) * dYk
//   ReduceL2         dX = X * (dYk / Yk), 0 where Yk == 0 (PyTorch norm_backward)
//   ReduceSumSquare  dX = X * (2 dYk)
//   ReduceLogSum     dX = Expand(dYk / exp(Yk), Shape(X))   (exp(Yk) is the sum)
//   ReduceLogSumExp  dX = dYk * exp(X - Yk)   (PyTorch logsumexp_backward)
// Axes come from the attribute or the axes input (negative axes included); no axes means every
// axis, or none with noop_with_empty_axes=1 (then Y has X's shape and each formula still holds).
// Axes given as a non-constant input work too: Unsqueeze and ReduceSum take the same value.
// ReduceProd has no rule yet (differentiating through it names the op and node).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/reduction_gradients.h"
#include "trainrt/autodiff/register_gradients.h"

namespace trainrt {
namespace {

// How the forward Reduce* node reduces, as its rule needs it.
class ReducedAxes {
 public:
  explicit ReducedAxes(GradContext& ctx)
      : ctx_(ctx),
        axes_(ctx.node().input(1)),
        attr_axes_(ctx.node().attr_ints("axes", {})),
        keepdims_(ctx.node().attr_int("keepdims", 1) != 0),
        noop_(ctx.node().attr_int("noop_with_empty_axes", 0)) {}

  // v, of Y's shape, with the reduced axes restored as 1s. Without axes every axis was reduced
  // (Y is a scalar, which broadcasts as it is) or none was (Y has X's shape).
  Value* restore(Value* v) {
    Value* a = axes();
    return keepdims_ || !a ? v : ctx_.emit("Unsqueeze", {v, a});
  }

  // ReduceSum over the same axes with keepdims=1, for v of X's shape.
  Value* sum_keepdims(Value* v) {
    std::vector<Value*> inputs{v};
    if (Value* a = axes()) inputs.push_back(a);
    return ctx_.emit("ReduceSum", inputs,
                     {{"keepdims", Attribute::of_int(1)}, {"noop_with_empty_axes", Attribute::of_int(noop_)}});
  }

 private:
  // The axes as a 1-D i64 value (the node's input, or a constant made once from the attribute);
  // null when none are given.
  Value* axes() {
    if (!axes_ && !attr_axes_.empty()) axes_ = ctx_.const_i64(attr_axes_);
    return axes_;
  }

  GradContext& ctx_;
  Value* axes_;
  std::vector<int64_t> attr_axes_;
  bool keepdims_;
  int64_t noop_;
};

// v broadcast to X's shape.
Value* expand_to_input(GradContext& ctx, Value* v) {
  Value* x = ctx.input(0);
  if (v->shape.known_equal(x->shape)) return v;
  Value* e = ctx.emit("Expand", {v, ctx.shape_of(x)});
  e->shape = x->shape;  // inference cannot see through Shape(X) when X has symbolic dims
  return e;
}

void reduce_sum_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  ctx.set_input_grad(0, expand_to_input(ctx, axes.restore(ctx.output_grad(0))));
}

// The number of elements each output element averages, as a scalar of dY's type.
Value* reduced_count(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  if (x->shape.is_static() && dy->shape.is_static()) {
    const int64_t out = *dy->shape.numel();
    return ctx.scalar_like(dy, out == 0 ? 1.0 : static_cast<double>(*x->shape.numel()) / static_cast<double>(out));
  }
  Value* in_size = ctx.emit("CastLike", {ctx.emit("Size", {x}), dy});
  Value* out_size = ctx.emit("CastLike", {ctx.emit("Size", {dy}), dy});
  return ctx.emit("Div", {in_size, out_size});
}

void reduce_mean_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* scaled = ctx.emit("Div", {axes.restore(ctx.output_grad(0)), reduced_count(ctx)});
  ctx.set_input_grad(0, expand_to_input(ctx, scaled));
}

void reduce_max_min_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* dy = ctx.output_grad(0);
  Value* mask = ctx.emit("CastLike", {ctx.emit("Equal", {ctx.input(0), axes.restore(ctx.output(0))}), dy});
  Value* share = ctx.emit("Div", {axes.restore(dy), axes.sum_keepdims(mask)});
  ctx.set_input_grad(0, ctx.emit("Mul", {mask, share}));
}

void reduce_l1_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.emit("Sign", {ctx.input(0)}), axes.restore(ctx.output_grad(0))}));
}

void reduce_l2_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* y = axes.restore(ctx.output(0));
  Value* ratio = ctx.emit("Div", {axes.restore(ctx.output_grad(0)), y});
  Value* zero = ctx.scalar_like(y, 0.0);
  Value* safe = ctx.emit("Where", {ctx.emit("Equal", {y, zero}), zero, ratio});
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.input(0), safe}));
}

void reduce_sum_square_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* dy = axes.restore(ctx.output_grad(0));
  Value* twice = ctx.emit("Mul", {dy, ctx.scalar_like(dy, 2.0)});
  ctx.set_input_grad(0, ctx.emit("Mul", {ctx.input(0), twice}));
}

void reduce_log_sum_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* sum = ctx.emit("Exp", {axes.restore(ctx.output(0))});
  ctx.set_input_grad(0, expand_to_input(ctx, ctx.emit("Div", {axes.restore(ctx.output_grad(0)), sum})));
}

void reduce_log_sum_exp_grad(GradContext& ctx) {
  ReducedAxes axes(ctx);
  Value* softmax = ctx.emit("Exp", {ctx.emit("Sub", {ctx.input(0), axes.restore(ctx.output(0))})});
  ctx.set_input_grad(0, ctx.emit("Mul", {softmax, axes.restore(ctx.output_grad(0))}));
}

}  // namespace

void register_reduction_gradients(GradientRegistry& r) {
  r.add("", "ReduceSum", reduce_sum_grad);
  r.add("", "ReduceMean", reduce_mean_grad);
  r.add("", "ReduceMax", reduce_max_min_grad);
  r.add("", "ReduceMin", reduce_max_min_grad);
  r.add("", "ReduceL1", reduce_l1_grad);
  r.add("", "ReduceL2", reduce_l2_grad);
  r.add("", "ReduceSumSquare", reduce_sum_square_grad);
  r.add("", "ReduceLogSum", reduce_log_sum_grad);
  r.add("", "ReduceLogSumExp", reduce_log_sum_exp_grad);
  register_normalization_gradients(r);
  register_loss_gradients(r);
}

}  // namespace trainrt
