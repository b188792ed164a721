// The shape and data movement family: registration and the argument readers its parts share.
#include "trainrt/ops/tensor_schemas.h"

#include "trainrt/ops/register_schemas.h"

namespace trainrt {

void register_tensor_schemas(OpRegistry& r) {
  register_reshape_schemas(r);
  register_select_schemas(r);
  register_source_schemas(r);
  register_gather_elements_schema(r);
  register_cumsum_schema(r);
  register_valid_rows_schema(r);
  register_gather_nd_schemas(r);
  register_arg_reduce_schemas(r);
  register_pad_schemas(r);
  register_top_k_schema(r);
  register_resize_schemas(r);
  register_dft_schemas(r);
  register_non_zero_schema(r);
}

ArgState read_ints_arg(const InferenceContext& ctx, int input, const std::string& attr,
                       std::vector<int64_t>& out) {
  if (ctx.has_input(input)) {
    ctx.expect_dtype(input, {DType::kI64, DType::kI32});
    const Tensor* v = ctx.input_value(input);
    if (!v || !v->defined()) return ArgState::kUnknown;
    out = v->to_i64_vector();
    return ArgState::kKnown;
  }
  if (ctx.node().has_attr(attr)) {
    out = ctx.node().attr_ints(attr, {});
    return ArgState::kKnown;
  }
  return ArgState::kAbsent;
}

int64_t checked_axis(const InferenceContext& ctx, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    ctx.fail(fmt(what, " ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

std::optional<int64_t> static_length(const InferenceContext& ctx, int input) {
  if (!ctx.has_input(input)) return std::nullopt;
  const Shape& s = ctx.input_shape(input);
  if (!s.rank_known || s.rank() != 1 || !s.dims[0].is_static()) return std::nullopt;
  return s.dims[0].value;
}

Shape dynamic_shape(std::optional<int64_t> rank) {
  if (!rank) return Shape::unknown_rank();
  return Shape(std::vector<Dim>(static_cast<size_t>(*rank)));
}

Shape shape_of_dims_input(const InferenceContext& ctx, int input) {
  const Tensor* dims = ctx.input_value(input);
  return dims && dims->defined() ? Shape::of(dims->to_i64_vector()) : dynamic_shape(static_length(ctx, input));
}

Dim dim_product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  int64_t product = 1;
  const Dim* dynamic = nullptr;
  int num_dynamic = 0;
  for (size_t i = begin; i < end; ++i) {
    if (dims[i].is_static()) {
      product *= dims[i].value;
    } else {
      dynamic = &dims[i];
      ++num_dynamic;
    }
  }
  if (num_dynamic == 0 || product == 0) return Dim(product);
  if (num_dynamic == 1 && product == 1) return *dynamic;
  return Dim();
}

}  // namespace trainrt
