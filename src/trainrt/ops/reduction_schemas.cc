// Schemas of the reduction family: Reduce*, Softmax, LogSoftmax, LayerNormalization and the two
// classification losses SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (ONNX operator
// specs; the opset differences are noted at each op).
#include <string>

#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/reduce_axes.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

void expect_float(const InferenceContext& ctx, int i) {
  ctx.expect_dtype(i, {DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
}

// Checks that `axis` lies in [-rank, rank) and returns it in [0, rank).
int64_t checked_axis(const InferenceContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.fail(fmt("axis ", axis, " is out of range for input 0 of shape ", to_string(ctx.input_shape(0))));
  return axis < 0 ? axis + rank : axis;
}

// Reduce*: (d0, ..., dr-1) -> the same dims with the reduced ones set to 1 (keepdims=1, the
// default) or dropped. Axes given as an input are known only for constants at plan time; then
// keepdims=1 still gives the rank (each dim stays or becomes 1) and keepdims=0 gives nothing.
void infer_reduce(InferenceContext& ctx) {
  const Node& node = ctx.node();
  const DType t = ctx.input_dtype(0);
  const bool min_max = node.op_type() == "ReduceMax" || node.op_type() == "ReduceMin";
  if (t == DType::kBool && !min_max) ctx.fail("bool input is only supported by ReduceMax and ReduceMin");
  if (ctx.has_input(1)) ctx.expect_dtype(1, {DType::kI64});
  const Shape& in = ctx.input_shape(0);
  const bool keepdims = node.attr_int("keepdims", 1) != 0;
  const bool axes_unknown = ctx.has_input(1) && ctx.input_value(1) == nullptr;
  if (!in.rank_known || (axes_unknown && !keepdims)) {
    ctx.set_output(0, t, Shape::unknown_rank());
    return;
  }
  Shape out;
  if (axes_unknown) {
    out = in;
    for (Dim& d : out.dims)
      if (!(d.is_static() && d.value == 1)) d = Dim();
  } else {
    std::vector<bool> mask = ReduceAxes::of(node).mask(ctx.input_value(1), in.rank());
    for (size_t i = 0; i < mask.size(); ++i) {
      if (!mask[i]) out.dims.push_back(in.dims[i]);
      else if (keepdims) out.dims.push_back(Dim(1));
    }
  }
  ctx.set_output(0, t, std::move(out));
}

// Softmax / LogSoftmax: y has x's shape. From opset 13 along one axis (default -1); before, x is
// coerced to 2-D at `axis` (default 1) and normalized along the flattened trailing dims.
void infer_softmax(InferenceContext& ctx) {
  expect_float(ctx, 0);
  const Shape& x = ctx.input_shape(0);
  const Node& node = ctx.node();
  const int64_t axis = node.attr_int("axis", node.opset() < 13 ? 1 : -1);
  if (x.rank_known) checked_axis(ctx, axis, x.rank());
  ctx.set_output(0, ctx.input_dtype(0), x);
}

// The stash type U of LayerNormalization: the type of Mean and InvStdDev.
DType stash_dtype(const InferenceContext& ctx) {
  const int64_t code = ctx.node().attr_int("stash_type", 1);
  if (code != 1 && code != 16) ctx.fail(fmt("stash_type ", code, " is not float (1) or bfloat16 (16)"));
  return dtype_from_onnx(static_cast<int>(code));
}

// Whether `b` broadcasts unidirectionally to `x` (ONNX Broadcasting.md); unknown dims pass.
bool broadcasts_to(const Shape& b, const Shape& x) {
  if (!b.rank_known || !x.rank_known) return true;
  if (b.rank() > x.rank()) return false;
  const size_t off = static_cast<size_t>(x.rank() - b.rank());
  for (size_t i = 0; i < b.dims.size(); ++i) {
    const Dim& bd = b.dims[i];
    const Dim& xd = x.dims[off + i];
    if (bd.is_static() && xd.is_static() && bd.value != 1 && bd.value != xd.value) return false;
  }
  return true;
}

// LayerNormalization (opset 17): X (d0, ..., dr-1) normalized over dims [axis, r).
// Y: X's shape and type; Mean, InvStdDev: (d0, ..., d(axis-1), 1, ..., 1) of the stash type.
void infer_layer_norm(InferenceContext& ctx) {
  expect_float(ctx, 0);
  const DType t = ctx.input_dtype(0);
  const Shape& x = ctx.input_shape(0);
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input_dtype(i) != t)
      ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ", dtype_name(t),
                   " like input 0"));
    if (!broadcasts_to(ctx.input_shape(i), x))
      ctx.fail(fmt("input ", i, " of shape ", to_string(ctx.input_shape(i)),
                   " does not broadcast to input 0 of shape ", to_string(x)));
  }
  const DType u = stash_dtype(ctx);
  ctx.set_output(0, t, x);
  if (!x.rank_known) {
    ctx.set_output(1, u, Shape::unknown_rank());
    ctx.set_output(2, u, Shape::unknown_rank());
    return;
  }
  const int64_t axis = checked_axis(ctx, ctx.node().attr_int("axis", -1), x.rank());
  Shape stat = x;
  for (int64_t i = axis; i < x.rank(); ++i) stat.dims[static_cast<size_t>(i)] = Dim(1);
  ctx.set_output(1, u, stat);
  ctx.set_output(2, u, stat);
}

// The shared part of the two losses. scores (N, C, d1, ..., dk), labels (N, d1, ..., dk) of i32
// or i64, optional weights (C). The loss is (N, d1, ..., dk) for reduction "none", else a scalar.
void infer_classification_loss(InferenceContext& ctx) {
  expect_float(ctx, 0);
  ctx.expect_dtype(1, {DType::kI32, DType::kI64});
  const DType t = ctx.input_dtype(0);
  const std::string reduction = ctx.node().attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    ctx.fail(fmt("reduction '", reduction, "' is not one of none, sum, mean"));
  const Shape& scores = ctx.input_shape(0);
  const Shape& labels = ctx.input_shape(1);
  if (scores.rank_known && scores.rank() < 2)
    ctx.fail(fmt("input 0 (scores) has shape ", to_string(scores), ", expected (N, C, d1, ..., dk)"));
  // Per-sample dims: labels' dims, with scores' where labels' are unknown.
  Shape per_sample = labels;
  if (scores.rank_known && labels.rank_known) {
    if (labels.rank() != scores.rank() - 1)
      ctx.fail(fmt("input 1 (labels) has shape ", to_string(labels),
                   ", expected (N, d1, ..., dk) for input 0 of shape ", to_string(scores)));
    for (size_t i = 0; i < per_sample.dims.size(); ++i) {
      const Dim& s = scores.dims[i == 0 ? 0 : i + 1];
      Dim& l = per_sample.dims[i];
      if (s.is_static() && l.is_static() && s.value != l.value)
        ctx.fail(fmt("input 1 (labels) has shape ", to_string(labels), ", which does not match input 0 of shape ",
                     to_string(scores)));
      if (!l.is_static()) l = s;
    }
  } else if (scores.rank_known) {
    per_sample = scores;
    per_sample.dims.erase(per_sample.dims.begin() + 1);
  }
  if (ctx.has_input(2)) {
    const Shape& w = ctx.input_shape(2);
    if (ctx.input_dtype(2) != t)
      ctx.fail(fmt("input 2 (weights) has dtype ", dtype_name(ctx.input_dtype(2)), ", expected ", dtype_name(t)));
    const bool c_static = scores.rank_known && scores.dims[1].is_static();
    if (w.rank_known && (w.rank() != 1 || (c_static && w.dims[0].is_static() && !(w.dims[0] == scores.dims[1]))))
      ctx.fail(fmt("input 2 (weights) has shape ", to_string(w), ", expected (C) for input 0 of shape ",
                   to_string(scores)));
  }
  ctx.set_output(0, t, reduction == "none" ? per_sample : Shape(std::vector<Dim>{}));
  ctx.set_output(1, t, scores);  // SoftmaxCrossEntropyLoss's optional log_prob
}

}  // namespace

void register_reduction_schemas(OpRegistry& r) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    r.add({.name = op, .min_inputs = 1, .max_inputs = 2, .infer = infer_reduce});
  // Both kernels read a whole row (or slab) before writing any of it, so y may overwrite x.
  r.add({.name = "Softmax", .min_inputs = 1, .max_inputs = 1, .infer = infer_softmax, .inplace = {{0, 0}}});
  r.add({.name = "LogSoftmax", .min_inputs = 1, .max_inputs = 1, .infer = infer_softmax, .inplace = {{0, 0}}});
  r.add({.name = "LayerNormalization", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 3,
         .infer = infer_layer_norm, .inplace = {{0, 0}}});
  // log_prob (output 1) is written after the loss, each element from the same score: over the scores.
  r.add({.name = "SoftmaxCrossEntropyLoss", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
         .infer = infer_classification_loss, .inplace = {{0, 1}}});
  r.add({.name = "NegativeLogLikelihoodLoss", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
         .max_outputs = 1, .infer = infer_classification_loss});
}

}  // namespace trainrt
