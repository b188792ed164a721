// Schemas of the ops that rearrange one tensor: Reshape, Flatten, Squeeze, Unsqueeze (views of
// the same bytes, so in-place), Transpose, Expand and Tile. Semantics: ONNX operator spec.
#include <algorithm>

#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

// Resolves Reshape's target against the input shape (ONNX Reshape-14): 0 copies the input dim
// (unless allowzero), -1 takes what is left. With symbolic dims, equal symbols on both sides
// cancel, so (batch, 6) -> (-1, 3, 2) still gives (batch, 3, 2).
Shape reshape_target(const InferenceContext& ctx, const Shape& in, const std::vector<int64_t>& target,
                     bool allowzero) {
  std::vector<Dim> out;
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t v = target[i];
    if (v == -1) {
      if (infer_at >= 0) ctx.fail(fmt("shape ", to_string(target), " has more than one -1"));
      infer_at = static_cast<int>(i);
      out.emplace_back();
    } else if (v == 0 && !allowzero) {
      if (in.rank_known && static_cast<int64_t>(i) >= in.rank())
        ctx.fail(fmt("shape ", to_string(target), " copies dim ", i, " of input ", to_string(in)));
      out.push_back(in.rank_known ? in.dims[i] : Dim());
    } else if (v < 0) {
      ctx.fail(fmt("shape ", to_string(target), " has a negative dim"));
    } else {
      has_zero |= v == 0;
      out.emplace_back(v);
    }
  }
  if (has_zero && infer_at >= 0)
    ctx.fail(fmt("shape ", to_string(target), " has both 0 (allowzero) and -1"));
  if (!in.rank_known) return Shape(std::move(out));

  int64_t in_static = 1, out_static = 1;
  std::vector<const Dim*> in_dynamic, out_dynamic;
  for (const Dim& d : in.dims) {
    if (d.is_static()) in_static *= d.value;
    else in_dynamic.push_back(&d);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == infer_at) continue;
    if (out[i].is_static()) out_static *= out[i].value;
    else out_dynamic.push_back(&out[i]);
  }
  // Equal symbols have equal values at run time: they cancel out of the element count.
  for (auto it = out_dynamic.begin(); it != out_dynamic.end();) {
    auto match =
        std::find_if(in_dynamic.begin(), in_dynamic.end(), [&](const Dim* d) { return *d == **it; });
    if (match == in_dynamic.end()) {
      ++it;
    } else {
      in_dynamic.erase(match);
      it = out_dynamic.erase(it);
    }
  }
  const auto mismatch = [&] {
    ctx.fail(fmt("cannot reshape input of shape ", to_string(in), " to ", to_string(target)));
  };
  if (in_dynamic.empty() && out_dynamic.empty()) {
    if (infer_at < 0) {
      if (in_static != out_static) mismatch();
    } else {
      if (out_static == 0 || in_static % out_static != 0) mismatch();
      out[static_cast<size_t>(infer_at)] = Dim(in_static / out_static);
    }
  } else if (infer_at >= 0 && out_dynamic.empty() && in_dynamic.size() == 1 && in_static == out_static &&
             out_static != 0) {
    out[static_cast<size_t>(infer_at)] = *in_dynamic[0];
  }
  return Shape(std::move(out));
}

void infer_reshape(InferenceContext& ctx) {
  const DType t = ctx.input_dtype(0);
  std::vector<int64_t> target;
  switch (read_ints_arg(ctx, 1, "shape", target)) {
    case ArgState::kAbsent: ctx.fail("needs a shape input (or a 'shape' attribute before opset 5)");
    case ArgState::kUnknown: ctx.set_output(0, t, dynamic_shape(static_length(ctx, 1))); return;
    case ArgState::kKnown: break;
  }
  const bool allowzero = ctx.node().attr_int("allowzero", 0) != 0;
  ctx.set_output(0, t, reshape_target(ctx, ctx.input_shape(0), target, allowzero));
}

void infer_flatten(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  if (!in.rank_known) return ctx.set_output(0, t, dynamic_shape(2));
  const int64_t r = in.rank();
  int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < -r || axis > r) ctx.fail(fmt("axis ", axis, " is out of range for input ", to_string(in)));
  const size_t a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  ctx.set_output(0, t, Shape({dim_product(in.dims, 0, a), dim_product(in.dims, a, in.dims.size())}));
}

void infer_squeeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  std::vector<int64_t> axes;
  const ArgState state = read_ints_arg(ctx, 1, "axes", axes);
  if (!in.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  const int64_t r = in.rank();
  if (state == ArgState::kUnknown) {
    std::optional<int64_t> n = static_length(ctx, 1);
    return ctx.set_output(0, t, dynamic_shape(n ? std::optional<int64_t>(r - *n) : std::nullopt));
  }
  std::vector<bool> drop(static_cast<size_t>(r), false);
  if (axes.empty()) {
    // No axes: every dim of size 1 goes; a dynamic dim may or may not be 1.
    for (int64_t i = 0; i < r; ++i) {
      const Dim& d = in.dims[static_cast<size_t>(i)];
      if (!d.is_static()) return ctx.set_output(0, t, Shape::unknown_rank());
      drop[static_cast<size_t>(i)] = d.value == 1;
    }
  }
  for (int64_t axis : axes) {
    const size_t a = static_cast<size_t>(checked_axis(ctx, axis, r, "axis"));
    if (drop[a]) ctx.fail(fmt("axis ", axis, " is repeated"));
    if (in.dims[a].is_static() && in.dims[a].value != 1)
      ctx.fail(fmt("cannot squeeze axis ", axis, " of input ", to_string(in), ": its size is not 1"));
    drop[a] = true;
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < drop.size(); ++i)
    if (!drop[i]) out.push_back(in.dims[i]);
  ctx.set_output(0, t, Shape(std::move(out)));
}

void infer_unsqueeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  std::vector<int64_t> axes;
  const ArgState state = read_ints_arg(ctx, 1, "axes", axes);
  if (state == ArgState::kAbsent) ctx.fail("needs axes (an input from opset 13, an attribute before)");
  if (!in.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  if (state == ArgState::kUnknown) {
    std::optional<int64_t> n = static_length(ctx, 1);
    const std::optional<int64_t> rank = n ? std::optional<int64_t>(in.rank() + *n) : std::nullopt;
    return ctx.set_output(0, t, dynamic_shape(rank));
  }
  const int64_t out_rank = in.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t axis : axes) {
    const size_t a = static_cast<size_t>(checked_axis(ctx, axis, out_rank, "axis"));
    if (inserted[a]) ctx.fail(fmt("axis ", axis, " is repeated"));
    inserted[a] = true;
  }
  std::vector<Dim> out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    out.push_back(inserted[static_cast<size_t>(i)] ? Dim(1) : in.dims[next++]);
  ctx.set_output(0, t, Shape(std::move(out)));
}

void infer_transpose(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  const bool has_perm = ctx.node().has_attr("perm");
  std::vector<int64_t> perm = ctx.node().attr_ints("perm", {});
  if (!in.rank_known) {
    const std::optional<int64_t> rank = has_perm ? std::optional<int64_t>(perm.size()) : std::nullopt;
    return ctx.set_output(0, t, dynamic_shape(rank));
  }
  const int64_t r = in.rank();
  if (!has_perm)
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r)
    ctx.fail(fmt("perm ", to_string(perm), " does not fit input ", to_string(in)));
  std::vector<bool> used(static_cast<size_t>(r), false);
  std::vector<Dim> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= r || used[static_cast<size_t>(p)])
      ctx.fail(fmt("perm ", to_string(perm), " is not a permutation of the ", r, " input axes"));
    used[static_cast<size_t>(p)] = true;
    out.push_back(in.dims[static_cast<size_t>(p)]);
  }
  ctx.set_output(0, t, Shape(std::move(out)));
}

void infer_expand(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  std::vector<int64_t> shape;
  if (read_ints_arg(ctx, 1, "shape", shape) != ArgState::kKnown) {
    std::optional<int64_t> n = static_length(ctx, 1);
    std::optional<int64_t> rank;
    if (n && in.rank_known) rank = std::max(*n, in.rank());
    return ctx.set_output(0, t, dynamic_shape(rank));
  }
  for (int64_t d : shape)
    if (d < 0) ctx.fail(fmt("shape ", to_string(shape), " has a negative dim"));
  try {
    ctx.set_output(0, t, broadcast_shapes(in, Shape::of(shape)));
  } catch (const ShapeError& e) {
    ctx.fail(e.what());
  }
}

void infer_tile(InferenceContext& ctx) {
  const Shape& in = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  std::vector<int64_t> repeats;
  const ArgState state = read_ints_arg(ctx, 1, "repeats", repeats);
  if (!in.rank_known) return ctx.set_output(0, t, Shape::unknown_rank());
  if (state != ArgState::kKnown) return ctx.set_output(0, t, dynamic_shape(in.rank()));
  if (static_cast<int64_t>(repeats.size()) != in.rank())
    ctx.fail(fmt("repeats ", to_string(repeats), " does not fit input ", to_string(in)));
  std::vector<Dim> out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const Dim& d = in.dims[i];
    const int64_t rep = repeats[i];
    if (rep < 0) ctx.fail(fmt("repeats ", to_string(repeats), " has a negative value"));
    if (d.is_static() || rep == 0) out.emplace_back(d.is_static() ? d.value * rep : 0);
    else out.push_back(rep == 1 ? d : Dim());
  }
  ctx.set_output(0, t, Shape(std::move(out)));
}

}  // namespace

void register_reshape_schemas(OpRegistry& r) {
  // The reshape-like views: the output is the input's bytes, so the plan makes it a view of the
  // input (or, where it cannot, writes it over the input's buffer when that input dies there).
  const std::vector<std::pair<int, int>> same_bytes = {{0, 0}};
  r.add({.name = "Reshape", .min_inputs = 1, .max_inputs = 2, .infer = infer_reshape, .inplace = same_bytes,
         .is_view = true});
  r.add({.name = "Flatten", .min_inputs = 1, .max_inputs = 1, .infer = infer_flatten, .inplace = same_bytes,
         .is_view = true});
  r.add({.name = "Squeeze", .min_inputs = 1, .max_inputs = 2, .infer = infer_squeeze, .inplace = same_bytes,
         .is_view = true});
  r.add({.name = "Unsqueeze", .min_inputs = 1, .max_inputs = 2, .infer = infer_unsqueeze, .inplace = same_bytes,
         .is_view = true});
  r.add({.name = "Transpose", .min_inputs = 1, .max_inputs = 1, .infer = infer_transpose});
  r.add({.name = "Expand", .min_inputs = 2, .max_inputs = 2, .infer = infer_expand, .view_when_same_dims = true});
  r.add({.name = "Tile", .min_inputs = 2, .max_inputs = 2, .infer = infer_tile});
}

}  // namespace trainrt
