// Gradient rules of the ops that select or join parts of tensors (ONNX Runtime's gradient
// builders and PyTorch's derivatives.yaml give the same math):
//   Concat(X0, .., Xn-1, axis)   dXi = Split(dY, sizes, axis), sizes = each Xi's dim along axis
//                                (constants when static, else Shape(Xi, start=axis, end=axis+1))
//   Split(X, axis, sizes)        dX = Concat(dY0, .., dYn-1, axis), with zeros
//                                (ConstantOfShape(dims(Yi))) for outputs that got no gradient
//   Slice(X, starts, ends, axes, steps)
//                                dX = SliceGrad(dY, dims(X), starts, ends, axes, steps): dY written
//                                into zeros at the sliced positions (either opset form)
//   Gather(X, indices, axis)     dX = GatherGrad(dims(X), indices, dY, axis): dY's rows
//                                scatter-added into zeros; repeated indices accumulate
//   GatherElements(X, indices, axis)
//                                dX = GatherElementsGrad(dims(X), indices, dY, axis): each dY
//                                element added where it was read (torch.gather's scatter_add)
//   Embedding(W, indices, padding_idx)
//                                dW = GatherGrad(dims(W), indices, dY, axis=0, padding_idx): row
//                                padding_idx gets no gradient (torch's embedding_backward)
//   Resize(X, roi, scales, sizes), Upsample(X, scales)
//                                dX = ResizeGrad(dY, dims(X), roi, scales, sizes): each dY element
//                                spread over the pixels it was interpolated from, same weights
// Integer inputs (indices, sizes, bounds) get no gradient; the builder never asks for one.
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/tensor_gradients.h"
#include "trainrt/core/error.h"
#include "trainrt/ops/resize_args.h"

namespace trainrt {
namespace {

// Zeros of v's dtype and shape: ConstantOfShape(dims(v)), v's symbolic dims kept.
Value* zeros_like(GradContext& ctx, Value* v) {
  Value* zero = ctx.emit("ConstantOfShape", {dims_of(ctx, v)},
                         {{"value", Attribute::of_tensor(Tensor::zeros(v->dtype, {1}))}});
  return with_shape_of(zero, v);
}

// Each Concat input's size along `axis` as a 1-D i64 value (one element per input).
Value* concat_sizes(GradContext& ctx, int64_t axis) {
  const Node& n = ctx.node();
  std::vector<int64_t> sizes;
  for (const Value* x : n.inputs()) {
    const Shape& s = x->shape;
    const int64_t a = s.rank_known && axis < 0 ? axis + s.rank() : axis;
    if (!s.rank_known || a < 0 || a >= s.rank() || !s.dims[static_cast<size_t>(a)].is_static()) break;
    sizes.push_back(s.dims[static_cast<size_t>(a)].value);
  }
  if (sizes.size() == n.inputs().size()) return ctx.const_i64(sizes);
  // Shape-15's start/end pick one dim without knowing the rank (end -1 + 1 = 0 would be empty).
  std::map<std::string, Attribute> pick{{"start", Attribute::of_int(axis)}};
  if (axis != -1) pick["end"] = Attribute::of_int(axis + 1);
  std::vector<Value*> parts;
  for (Value* x : n.inputs()) parts.push_back(ctx.emit("Shape", {x}, pick));
  return ctx.emit("Concat", parts, {{"axis", Attribute::of_int(0)}});
}

void concat_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  Value* dy = ctx.output_grad(0);
  const int num = n.num_inputs();
  if (num == 1) {
    ctx.set_input_grad(0, dy);
    return;
  }
  const int64_t axis = n.attr_int("axis", 1);  // Concat-1's default; required from opset 4
  std::vector<bool> wanted;
  for (int i = 0; i < num; ++i) wanted.push_back(ctx.needs_input_grad(i));
  std::vector<Value*> parts = ctx.emit_multi("Split", {dy, concat_sizes(ctx, axis)}, num,
                                             {{"axis", Attribute::of_int(axis)}}, kOnnxDomain, wanted);
  for (int i = 0; i < num; ++i)
    if (Value* g = parts[static_cast<size_t>(i)]) ctx.set_input_grad(i, with_shape_of(g, n.input(i)));
}

void split_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  std::vector<Value*> parts;
  for (int o = 0; o < n.num_outputs(); ++o) {
    if (Value* g = ctx.output_grad(o)) {
      parts.push_back(g);
      continue;
    }
    Value* y = n.output(o);
    if (!y)
      throw UnsupportedOp(fmt(n.describe(), ": the Split gradient needs output ", o,
                              " (it is omitted) to size that part's zero gradient"));
    parts.push_back(zeros_like(ctx, y));
  }
  Value* dx = parts.size() == 1 ? parts[0]
                                : ctx.emit("Concat", parts, {{"axis", Attribute::of_int(n.attr_int("axis", 0))}});
  ctx.set_input_grad(0, with_shape_of(dx, n.input(0)));
}

// Slice's starts, ends, axes, steps as SliceGrad inputs: the node's inputs 1-4 (opset >= 10) or
// constants made from its attributes (opset 1: starts, ends, optional axes, no steps).
std::vector<Value*> slice_args(GradContext& ctx) {
  const Node& n = ctx.node();
  if (n.input(1)) return {n.input(1), n.input(2), n.input(3), n.input(4)};
  Value* axes = n.has_attr("axes") ? ctx.const_i64(n.attr_ints("axes", {})) : nullptr;
  return {ctx.const_i64(n.attr_ints("starts", {})), ctx.const_i64(n.attr_ints("ends", {})), axes, nullptr};
}

void slice_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  std::vector<Value*> inputs{ctx.output_grad(0), dims_of(ctx, x)};
  for (Value* a : slice_args(ctx)) inputs.push_back(a);
  while (!inputs.back()) inputs.pop_back();  // omitted trailing axes / steps
  ctx.set_input_grad(0, with_shape_of(ctx.emit("SliceGrad", inputs, {}, kTrainrtDomain), x));
}

void gather_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dx = ctx.emit("GatherGrad", {dims_of(ctx, x), ctx.input(1), ctx.output_grad(0)},
                       {{"axis", Attribute::of_int(ctx.node().attr_int("axis", 0))}}, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, x));
}

void gather_nd_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dx = ctx.emit("GatherNDGrad", {dims_of(ctx, x), ctx.input(1), ctx.output_grad(0)},
                       {{"batch_dims", Attribute::of_int(ctx.node().attr_int("batch_dims", 0))}}, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, x));
}

void scatter_nd_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const std::string reduction = n.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add")
    throw UnsupportedOp(fmt(n.describe(), ": no gradient for reduction '", reduction, "' (none and add have one)"));
  Value* dy = ctx.output_grad(0);
  if (ctx.needs_input_grad(0)) {
    Value* dx = dy;
    if (reduction == "none") {  // the written slices came from updates, not data
      dx = ctx.emit("ScatterND", {dy, ctx.input(1), zeros_like(ctx, ctx.input(2))});
    }
    ctx.set_input_grad(0, with_shape_of(dx, ctx.input(0)));
  }
  if (ctx.needs_input_grad(2)) ctx.set_input_grad(2, with_shape_of(ctx.emit("GatherND", {dy, ctx.input(1)}), ctx.input(2)));
}

// dX = PadGrad(dY, dims(X), pads, [axes]): each dY element added where it was read from.
void pad_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  std::vector<Value*> inputs = {ctx.output_grad(0), dims_of(ctx, ctx.input(0)), ctx.input(1)};
  if (n.input(3)) inputs.push_back(ctx.input(3));
  const std::string mode = n.attr_string("mode", "constant");
  Value* dx = ctx.emit("PadGrad", inputs, {{"mode", Attribute::of_string(mode)}}, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, ctx.input(0)));
  // The constant fills the padding: its gradient is dY summed there, all of dY less what reached X.
  if (mode == "constant" && n.input(2) && ctx.needs_input_grad(2)) {
    Value* all = ctx.emit("ReduceSum", {ctx.output_grad(0)}, {{"keepdims", Attribute::of_int(0)}});
    Value* copied = ctx.emit("ReduceSum", {dx}, {{"keepdims", Attribute::of_int(0)}});
    Value* c = ctx.input(2);  // a scalar, or one element of shape (1)
    ctx.set_input_grad(2, with_shape_of(ctx.emit("Reshape", {ctx.emit("Sub", {all, copied}), dims_of(ctx, c)}), c));
  }
}

// ScatterElements (none, add): dData = dY, the written positions zeroed for none;
// dUpdates = GatherElements(dY, indices, axis).
void scatter_elements_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const std::string reduction = n.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add")
    throw UnsupportedOp(fmt(n.describe(), ": no gradient for reduction '", reduction, "' (none and add have one)"));
  const Attribute axis = Attribute::of_int(n.attr_int("axis", 0));
  Value* dy = ctx.output_grad(0);
  if (ctx.needs_input_grad(0)) {
    Value* dx = dy;
    if (reduction == "none") {
      dx = ctx.emit("ScatterElements", {dy, ctx.input(1), zeros_like(ctx, ctx.input(2))}, {{"axis", axis}});
    }
    ctx.set_input_grad(0, with_shape_of(dx, ctx.input(0)));
  }
  if (ctx.needs_input_grad(2))
    ctx.set_input_grad(2, with_shape_of(ctx.emit("GatherElements", {dy, ctx.input(1)}, {{"axis", axis}}), ctx.input(2)));
}

// TopK's values: dX = GatherElementsGrad(dims(X), Indices, dValues, axis) (the indices have no gradient).
void top_k_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  Value* x = ctx.input(0);
  Value* dx = ctx.emit("GatherElementsGrad", {dims_of(ctx, x), ctx.output(1), ctx.output_grad(0)},
                       {{"axis", Attribute::of_int(n.attr_int("axis", -1))}}, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, x));
}

void gather_elements_grad(GradContext& ctx) {
  Value* x = ctx.input(0);
  Value* dx = ctx.emit("GatherElementsGrad", {dims_of(ctx, x), ctx.input(1), ctx.output_grad(0)},
                       {{"axis", Attribute::of_int(ctx.node().attr_int("axis", 0))}}, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, x));
}

void embedding_grad(GradContext& ctx) {
  Value* w = ctx.input(0);
  const int64_t padding_idx = ctx.node().attr_int("padding_idx", 0);
  Value* dw = ctx.emit("GatherGrad", {dims_of(ctx, w), ctx.input(1), ctx.output_grad(0)},
                       {{"axis", Attribute::of_int(0)}, {"padding_idx", Attribute::of_int(padding_idx)}},
                       kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dw, w));
}

// GatherGrad read as a forward op (passes/padding_elimination.h scatters the kept tokens' rows
// back to the full batch with it): each row's gradient is the output gradient at its index; an
// addend's gradient is the output gradient itself.
void gather_grad_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  if (n.has_attr("padding_idx"))
    throw UnsupportedOp(fmt(n.describe(), ": no gradient for GatherGrad with padding_idx (its skipped rows)"));
  ctx.set_input_grad(2, ctx.emit("Gather", {ctx.output_grad(0), ctx.input(1)},
                                 {{"axis", Attribute::of_int(n.attr_int("axis", 0))}}));
  if (n.num_inputs() > 3 && n.input(3)) ctx.set_input_grad(3, ctx.output_grad(0));
}

// ResizeGrad takes Resize-11's inputs and the node's attributes; the older forms (Upsample, Resize-10)
// get their asymmetric, floor-rounding mapping spelled out.
void resize_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const ResizeArgs args = resize_args(n);
  auto input = [&](int i) { return i >= 0 ? n.input(i) : nullptr; };
  std::vector<Value*> inputs = {ctx.output_grad(0), dims_of(ctx, ctx.input(0)), input(args.roi_input),
                                input(args.scales_input), input(args.sizes_input)};
  while (inputs.back() == nullptr) inputs.pop_back();
  std::map<std::string, Attribute> attrs = n.attrs();
  if (args.coordinates == ResizeCoordinates::kAsymmetric && args.nearest == NearestRounding::kFloor) {
    attrs["coordinate_transformation_mode"] = Attribute::of_string("asymmetric");
    attrs["nearest_mode"] = Attribute::of_string("floor");
  }
  Value* dx = ctx.emit("ResizeGrad", inputs, attrs, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, ctx.input(0)));
}

}  // namespace

void register_select_gradients(GradientRegistry& r) {
  r.add("", "Concat", concat_grad);
  r.add("", "Split", split_grad);
  r.add("", "Slice", slice_grad);
  r.add("", "Gather", gather_grad);
  r.add("", "GatherElements", gather_elements_grad);
  r.add("", "GatherND", gather_nd_grad);
  r.add("", "ScatterND", scatter_nd_grad);
  r.add("", "Pad", pad_grad);
  r.add("", "Resize", resize_grad);
  r.add("", "Upsample", resize_grad);
  r.add("", "TopK", top_k_grad);
  r.add(kTrainrtDomain, "TopKInTorchOrder", top_k_grad);
  r.add("", "ScatterElements", scatter_elements_grad);
  r.add(kTrainrtDomain, "Embedding", embedding_grad);
  r.add(kTrainrtDomain, "GatherGrad", gather_grad_grad);
}

}  // namespace trainrt
