// PythonOp and PythonOpGrad (com.trainrt): a user's torch.autograd.Function kept as one node whose
// forward and backward are the user's own Python (the binding layer registers their kernels; no
// layer below src/python includes Python).
//
// PythonOp(x_0 .. x_{N-1}) -> (ctx, y_1 .. y_M)
//   ctx      i64 scalar: the handle of the Function's ctx, which the forward's Python keeps for
//            the backward (a saved value like any other, 8 bytes).
//   y_j      dtype output_dtypes[j-1]; shape output_shapes[j-1]: comma-separated dims, each an
//            int or "i<k>.<d>" for dim d of input k (how symbolic dims flow through), "" for 0-d.
//   attrs    function (the Function's module + __qualname__), call_id (the capture's record of the
//            call: the class and its non-tensor arguments), input_requires_grad (ints per input),
//            arguments (the positional arguments as JSON, tensors as {"tensor": k}: what the saved
//            graph tells a reader; capture/ops_python.py writes it, no kernel reads it).
//   Never folded, deduplicated or recomputed (deterministic = false): the user's forward runs
//   once per step, as in eager.
// PythonOpGrad(ctx, dy_1 .. dy_M, shape_0 .. shape_{N-1}) -> (dx_0 .. dx_{N-1})
//   dy_j     omitted where no gradient flows to y_j; shape_i: Shape(x_i), omitted where x_i needs
//            no gradient. dx_i has dtype input_dtypes[i] and dims shape_i.
#include <charconv>

#include "trainrt/ops/tensor_schemas.h"

namespace trainrt {
namespace {

// One dim of output_shapes: an int, or "i<k>.<d>" (dim d of input k).
Dim parse_dim(InferenceContext& ctx, std::string_view text, int output) {
  auto number = [&](std::string_view s) {
    int64_t v = -1;
    auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (err != std::errc() || end != s.data() + s.size() || v < 0)
      ctx.fail(fmt("output_shapes[", output, "] has a bad dim '", std::string(text), "'"));
    return v;
  };
  if (text.empty() || text[0] != 'i') return Dim(number(text));
  const size_t dot = text.find('.');
  if (dot == std::string_view::npos) ctx.fail(fmt("output_shapes[", output, "] has a bad dim '", std::string(text), "'"));
  const int64_t input = number(text.substr(1, dot - 1)), axis = number(text.substr(dot + 1));
  if (input >= ctx.num_inputs() || !ctx.has_input(static_cast<int>(input)))
    ctx.fail(fmt("output_shapes[", output, "] refers to input ", input, ", which the node does not have"));
  const Shape& in = ctx.input_shape(static_cast<int>(input));
  if (!in.rank_known) return Dim();
  if (axis >= in.rank())
    ctx.fail(fmt("output_shapes[", output, "] refers to dim ", axis, " of input ", input, " of shape ", to_string(in)));
  return in.dims[static_cast<size_t>(axis)];
}

void infer_python_op(InferenceContext& ctx) {
  const std::vector<int64_t> dtypes = ctx.node().attr_ints("output_dtypes", {});
  const Attribute* shapes = ctx.node().attr("output_shapes");
  const size_t outputs = static_cast<size_t>(ctx.num_outputs() - 1);
  if (dtypes.size() != outputs || !shapes || shapes->strings.size() != outputs)
    ctx.fail(fmt("has ", outputs, " outputs after ctx, but output_dtypes lists ", dtypes.size(), " and output_shapes ",
                 shapes ? shapes->strings.size() : 0));
  ctx.set_output(0, DType::kI64, Shape(std::vector<Dim>{}));
  for (size_t j = 0; j < outputs; ++j) {
    std::vector<Dim> dims;
    const std::string& text = shapes->strings[j];
    for (size_t start = 0; start < text.size();) {
      const size_t comma = std::min(text.find(',', start), text.size());
      dims.push_back(parse_dim(ctx, std::string_view(text).substr(start, comma - start), static_cast<int>(j)));
      start = comma + 1;
    }
    ctx.set_output(static_cast<int>(j + 1), dtype_from_onnx(static_cast<int>(dtypes[j])), Shape(std::move(dims)));
  }
}

void infer_python_op_grad(InferenceContext& ctx) {
  ctx.expect_dtype(0, {DType::kI64});
  const std::vector<int64_t> dtypes = ctx.node().attr_ints("input_dtypes", {});
  const int64_t grads = ctx.node().attr_int("num_output_grads", -1);
  if (grads < 0 || static_cast<size_t>(ctx.num_outputs()) != dtypes.size())
    ctx.fail(fmt("needs num_output_grads and one input_dtypes entry per output (", ctx.num_outputs(), " outputs, ",
                 dtypes.size(), " dtypes)"));
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (!ctx.has_output(i)) continue;
    const int shape_input = static_cast<int>(1 + grads + i);
    if (!ctx.has_input(shape_input)) ctx.fail(fmt("output ", i, " is wanted, but its shape (input ", shape_input, ") is not given"));
    const DType t = dtype_from_onnx(static_cast<int>(dtypes[static_cast<size_t>(i)]));
    const Tensor* dims = ctx.input_value(shape_input);
    if (!dims || !dims->defined()) {
      ctx.set_output(i, t, dynamic_shape(static_length(ctx, shape_input)));
    } else {
      ctx.set_output(i, t, Shape::of(dims->to_i64_vector()));
    }
  }
}

}  // namespace

void register_python_op_schemas(OpRegistry& r) {
  const std::string trainrt(kTrainrtDomain);
  r.add({.domain = trainrt, .name = "PythonOp", .min_inputs = 0, .max_inputs = OpSchema::kVariadic,
         .min_outputs = 1, .max_outputs = OpSchema::kVariadic, .infer = infer_python_op, .deterministic = false});
  r.add({.domain = trainrt, .name = "PythonOpGrad", .min_inputs = 1, .max_inputs = OpSchema::kVariadic,
         .min_outputs = 0, .max_outputs = OpSchema::kVariadic, .infer = infer_python_op_grad,
         .deterministic = false});
}

}  // namespace trainrt
