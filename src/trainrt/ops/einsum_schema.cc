// Einsum (ONNX opset 12): Y = Einsum(X_0, .., X_{n-1}), attribute equation (einsum_equation.h).
// Y's dims are its labels' dims, symbolic ones kept; every input has the same float or integer dtype.
#include "trainrt/ops/einsum_equation.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

void infer_einsum(InferenceContext& ctx) {
  const Node& node = ctx.node();
  if (!node.has_attr("equation")) ctx.fail("has no equation attribute");
  const DType dtype = ctx.input_dtype(0);
  std::vector<int64_t> ranks;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (ctx.input_dtype(i) != dtype)
      ctx.fail(fmt("input ", i, " is ", dtype_name(ctx.input_dtype(i)), ", input 0 ", dtype_name(dtype)));
    const Shape& s = ctx.input_shape(i);
    if (!s.rank_known) return ctx.set_output(0, dtype, Shape::unknown_rank());
    ranks.push_back(s.rank());
  }
  if (dtype == DType::kBool) ctx.fail("takes numbers, not bool");
  const EinsumEquation e = parse_einsum(node.describe(), node.attr_string("equation", ""), ranks);
  // A label's dim: a static one other than an ellipsis dim's broadcast 1, else a symbolic one.
  std::vector<Dim> dim(static_cast<size_t>(e.num_labels), Dim(1));
  std::vector<bool> seen(static_cast<size_t>(e.num_labels), false);
  std::vector<std::vector<int64_t>> dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input_shape(i);
    dims.emplace_back();
    for (size_t a = 0; a < s.dims.size(); ++a) {
      const Dim& d = s.dims[a];
      dims.back().push_back(d.is_static() ? d.value : -1);
      const size_t l = static_cast<size_t>(e.operands[static_cast<size_t>(i)][a]);
      const bool broadcast_one = e.ellipsis_label[l] && d.is_static() && d.value == 1;
      if (!seen[l] || (!dim[l].is_static() && d.is_static() && !broadcast_one) ||
          (dim[l].is_static() && dim[l].value == 1 && e.ellipsis_label[l] && !broadcast_one)) {
        dim[l] = d;
        seen[l] = true;
      }
    }
  }
  label_sizes(node.describe(), e, dims);  // a static mismatch throws
  std::vector<Dim> out;
  for (int l : e.output) out.push_back(dim[static_cast<size_t>(l)]);
  ctx.set_output(0, dtype, Shape(std::move(out)));
}

}  // namespace

void register_einsum_schema(OpRegistry& r) {
  r.add({.domain = "", .name = "Einsum", .min_inputs = 1, .max_inputs = 16, .infer = infer_einsum});
}

}  // namespace trainrt
