// Gradient rules of the shape and data movement family, and the registration of the whole family
// (the selection rules: select_gradients.cc). The math follows ONNX Runtime's gradient builders
// (orttraining/core/graph/gradient_builder.cc) and PyTorch's derivatives.yaml:
//   Reshape, Flatten, Squeeze, Unsqueeze   dX = Reshape(dY, dims(X))        (the same bytes)
//   Transpose(perm)                        dX = Transpose(dY, inverse(perm)); no perm (reversed
//                                          axes) is its own inverse
//   Expand                                 dX = ReduceSumToShape(dY, Shape(X))
//   Tile(repeats)                          dY (r0 d0, r1 d1, ..) viewed as (r0, d0, r1, d1, ..),
//                                          summed over the repeat axes 0, 2, 4, ... (PyTorch
//                                          repeat_backward)
//   Trilu(k, upper)                        dX = Trilu(dY, k, upper): the kept elements pass dY
//   CumSum(axis, exclusive, reverse)       dX = CumSum(dY, axis, exclusive, !reverse): x[j] feeds
//                                          every y[i] with i >= j (i > j if exclusive)
//   Dropout                                dX = DropoutGrad(dY, mask, ratio, training_mode) =
//                                          dY * mask / (1 - ratio) in training, else dY
// Shape, Size, Constant, ConstantOfShape and Range give no gradient (integer outputs, or values
// that do not depend on their inputs' values).
//
// Dims are never assumed static: dims_of(X) is a constant when X's shape is, else Shape(X), and
// the gradient keeps X's (possibly symbolic) shape, which inference cannot see through Shape(X).
#include "trainrt/autodiff/tensor_gradients.h"

#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {

Value* dims_of(GradContext& ctx, Value* x) {
  return x->shape.is_static() ? ctx.const_i64(x->shape.concrete()) : ctx.shape_of(x);
}

Value* with_shape_of(Value* grad, const Value* x) {
  if (x->shape.rank_known) grad->shape = x->shape;
  return grad;
}

namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

// Reshape, Flatten, Squeeze, Unsqueeze (either opset form of their axes): dX = Reshape(dY, dims(X)),
// or dY itself when it provably has X's shape already (equal static dims or equal symbols).
void reshape_like_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dy = ctx.output_grad(0);
  if (dy->shape.known_equal(x->shape)) {
    ctx.set_input_grad(0, dy);
    return;
  }
  ctx.set_input_grad(0, with_shape_of(ctx.emit("Reshape", {dy, dims_of(ctx, x)}), x));
}

// Y = Transpose(X, perm): Y's axis i is X's axis perm[i], so X's axis perm[i] is dY's axis i.
void transpose_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  Value* dy = ctx.output_grad(0);
  if (!n.has_attr("perm")) {  // reversed axes: an involution, whatever the rank
    ctx.set_input_grad(0, ctx.emit("Transpose", {dy}));
    return;
  }
  const std::vector<int64_t> perm = n.attr_ints("perm", {});
  std::vector<int64_t> inverse(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t p = perm[i];
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || inverse[static_cast<size_t>(p)] >= 0)
      throw InvalidModel(fmt(n.describe(), ": perm ", to_string(perm), " is not a permutation"));
    inverse[static_cast<size_t>(p)] = static_cast<int64_t>(i);
  }
  ctx.set_input_grad(0, ctx.emit("Transpose", {dy}, {{"perm", ints(inverse)}}));
}

void expand_grad(GradContext& ctx) { ctx.set_input_grad(0, ctx.reduce_to_shape_of(ctx.output_grad(0), ctx.input(0))); }

// The dims (r0, d0, r1, d1, ...) of Tile's output split into (repeat, input dim) pairs, as a 1-D
// i64 value: a constant when the repeats and X's dims are, else built at run time.
Value* tile_pair_dims(GradContext& ctx, Value* x, Value* repeats) {
  if (x->shape.is_static() && repeats->is_initializer()) {
    const std::vector<int64_t> r = repeats->data.to_i64_vector();
    const std::vector<int64_t> d = x->shape.concrete();
    std::vector<int64_t> pairs;
    for (size_t i = 0; i < d.size() && i < r.size(); ++i) pairs.insert(pairs.end(), {r[i], d[i]});
    return ctx.const_i64(pairs);
  }
  if (repeats->dtype != DType::kI64)
    repeats = ctx.emit("Cast", {repeats}, {{"to", Attribute::of_int(dtype_to_onnx(DType::kI64))}});
  Value* column = ctx.const_i64({1});
  Value* pairs = ctx.emit("Concat", {ctx.emit("Unsqueeze", {repeats, column}),
                                     ctx.emit("Unsqueeze", {dims_of(ctx, x), column})},
                          {{"axis", Attribute::of_int(1)}});  // (rank, 2)
  return ctx.emit("Reshape", {pairs, ctx.const_i64({-1})});    // (2 rank)
}

void tile_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  if (!x->shape.rank_known)
    throw UnsupportedOp(fmt(ctx.node().describe(), ": the Tile gradient needs an input of known rank"));
  const int64_t rank = x->shape.rank();
  Value* dy = ctx.output_grad(0);
  if (rank == 0) {  // a scalar tiled by no repeats is itself
    ctx.set_input_grad(0, dy);
    return;
  }
  Value* grouped = ctx.emit("Reshape", {dy, tile_pair_dims(ctx, x, ctx.input(1))});  // (r0, d0, r1, d1, ..)
  std::vector<int64_t> repeat_axes;
  for (int64_t i = 0; i < rank; ++i) repeat_axes.push_back(2 * i);
  Value* dx = ctx.emit("ReduceSum", {grouped, ctx.const_i64(repeat_axes)}, {{"keepdims", Attribute::of_int(0)}});
  ctx.set_input_grad(0, with_shape_of(dx, x));
}

void trilu_grad(GradContext& ctx) {
  std::vector<Value*> inputs{ctx.output_grad(0)};
  if (Value* k = ctx.node().input(1)) inputs.push_back(k);
  ctx.set_input_grad(0, ctx.emit("Trilu", inputs, {{"upper", Attribute::of_int(ctx.node().attr_int("upper", 1))}}));
}

void cumsum_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  ctx.set_input_grad(0, ctx.emit("CumSum", {ctx.output_grad(0), n.input(1)},
                                 {{"exclusive", Attribute::of_int(n.attr_int("exclusive", 0))},
                                  {"reverse", Attribute::of_int(n.attr_int("reverse", 0) == 0)}}));
}

// Whether v is a constant whose (first) element is 0 / false.
bool constant_zero(const Value* v) {
  return v && v->is_initializer() && v->data.numel() == 1 && v->data.to_double(0) == 0;
}

// Dropout-12/13 (data, ratio?, training_mode?) -> (output, mask?). It drops nothing unless
// training_mode is given and true, so before opset 12 (no training_mode) and with a constant false
// mode or zero ratio the gradient is dY itself. Otherwise backward must scale by the forward's own
// mask, which is output 1: without it the rule cannot know which elements were kept.
void dropout_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  Value* ratio = n.input(1);
  Value* training = n.input(2);
  Value* dy = ctx.output_grad(0);
  if (opset_below(n, 12) || !training || constant_zero(training) || constant_zero(ratio)) {
    ctx.set_input_grad(0, dy);
    return;
  }
  Value* mask = n.output(1);
  if (!mask)
    throw UnsupportedOp(fmt(n.describe(), ": the gradient of Dropout in training mode needs the node's mask "
                                          "(output 1); give the node a mask output"));
  ctx.set_input_grad(0, ctx.emit("DropoutGrad", {dy, mask, ratio, training}, {}, kTrainrtDomain));
}

}  // namespace

void register_tensor_gradients(GradientRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) r.add("", op, reshape_like_grad);
  r.add("", "Transpose", transpose_grad);
  r.add("", "Expand", expand_grad);
  r.add("", "Tile", tile_grad);
  r.add("", "Trilu", trilu_grad);
  r.add("", "CumSum", cumsum_grad);
  r.add("", "Dropout", dropout_grad);
  for (const char* op : {"Shape", "Size", "Constant", "ConstantOfShape", "Range"}) r.add_non_differentiable("", op);
  // Random draws: no gradient reaches their input (its dims, or Bernoulli's probabilities, as torch).
  for (const char* op : {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"})
    r.add_non_differentiable("", op);
  r.add_non_differentiable(kTrainrtDomain, "StopGradient");  // torch's detach
  register_select_gradients(r);
}

}  // namespace trainrt
