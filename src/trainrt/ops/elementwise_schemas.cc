// Schemas of the elementwise ops: unary math and activations, binary arithmetic with ONNX
// multidirectional broadcasting ("Broadcasting in ONNX", onnx/docs/Broadcasting.md), compare and
// logical ops, variadic Sum / Min / Max / Mean, Where, Clip, Cast / CastLike, Identity.
//
// Output shapes follow the inputs' shapes alone, so inference never needs input values: symbolic
// dims broadcast symbolically ((batch, 4) + (4) -> (batch, 4)) and an input of unknown rank
// gives an output of unknown rank. Every op may write its output over input 0; binary ops also
// over input 1 (the planner uses a pair only where dtype and size match).
#include <string>

#include "trainrt/ops/elementwise_args.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// Which element types an op accepts (ONNX type constraints restricted to TrainRT's dtypes).
enum class Types { kFloat, kSigned, kNumeric, kInteger, kBool, kAll };

bool accepts(Types types, DType t) {
  switch (types) {
    case Types::kFloat: return is_floating(t);
    case Types::kSigned: return is_floating(t) || (is_integer(t) && t != DType::kU8);
    case Types::kNumeric: return is_floating(t) || is_integer(t);
    case Types::kInteger: return is_integer(t);
    case Types::kBool: return t == DType::kBool;
    case Types::kAll: return t != DType::kUndefined;
  }
  return false;
}

std::string_view types_name(Types types) {
  switch (types) {
    case Types::kFloat: return "a floating type";
    case Types::kSigned: return "a floating or signed integer type";
    case Types::kNumeric: return "a numeric type";
    case Types::kInteger: return "an integer type";
    case Types::kBool: return "bool";
    case Types::kAll: return "any type";
  }
  return "";
}

void expect_types(const InferenceContext& ctx, int i, Types types) {
  const DType t = ctx.input_dtype(i);
  if (!accepts(types, t))
    ctx.fail(fmt("input ", i, " has dtype ", dtype_name(t), ", expected ", types_name(types)));
}

void expect_same_dtype(const InferenceContext& ctx, int i, int like) {
  if (ctx.input_dtype(i) != ctx.input_dtype(like))
    ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                 dtype_name(ctx.input_dtype(like)), " like input ", like));
}

// The broadcast of inputs [first, first + count), failing with both shapes named.
Shape broadcast_inputs(const InferenceContext& ctx, int first, int count) {
  Shape out = ctx.input_shape(first);
  for (int i = first + 1; i < first + count; ++i) {
    try {
      out = broadcast_shapes(out, ctx.input_shape(i));
    } catch (const ShapeError&) {
      ctx.fail(fmt("input ", i, " of shape ", to_string(ctx.input_shape(i)), " does not broadcast with ",
                   i == first + 1 ? fmt("input ", first, " of shape ") : std::string("the other inputs, "),
                   to_string(out)));
    }
  }
  return out;
}

// y = f(x): same dtype and shape.
template <Types kTypes>
void infer_unary(InferenceContext& ctx) {
  expect_types(ctx, 0, kTypes);
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

// The broadcast of inputs 0 and 1; before opset 7 input 1 may be aligned at attribute `axis`.
Shape broadcast_binary(const InferenceContext& ctx) {
  const Shape& a = ctx.input_shape(0);
  Shape b = ctx.input_shape(1);
  if (ctx.node().opset() < 7 && a.rank_known && b.rank_known)
    b.dims.insert(b.dims.end(), static_cast<size_t>(legacy_broadcast_trailing_ones(ctx.node(), a.rank(), b.rank())),
                  Dim(1));
  try {
    return broadcast_shapes(a, b);
  } catch (const ShapeError&) {
    ctx.fail(fmt("input 0 of shape ", to_string(a), " and input 1 of shape ", to_string(ctx.input_shape(1)),
                 " do not broadcast"));
  }
}

// y = f(a, b) with a and b of one dtype, broadcast; compare ops give bool.
template <Types kTypes, bool kCompare>
void infer_binary(InferenceContext& ctx) {
  expect_types(ctx, 0, kTypes);
  expect_same_dtype(ctx, 1, 0);
  ctx.set_output(0, kCompare ? DType::kBool : ctx.input_dtype(0), broadcast_binary(ctx));
}

// Sum / Min / Max / Mean: one or more inputs of one dtype, all broadcast together.
template <Types kTypes>
void infer_variadic(InferenceContext& ctx) {
  expect_types(ctx, 0, kTypes);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) ctx.fail(fmt("input ", i, " is missing"));
    expect_same_dtype(ctx, i, 0);
  }
  ctx.set_output(0, ctx.input_dtype(0), broadcast_inputs(ctx, 0, ctx.num_inputs()));
}

// Pow-12+: base and exponent may have different numeric types; y has the base's type.
void infer_pow(InferenceContext& ctx) {
  expect_types(ctx, 0, Types::kNumeric);
  expect_types(ctx, 1, Types::kNumeric);
  ctx.set_output(0, ctx.input_dtype(0), broadcast_binary(ctx));
}

// Where(condition: bool, x, y): x and y of one dtype; all three broadcast.
void infer_where(InferenceContext& ctx) {
  expect_types(ctx, 0, Types::kBool);
  expect_same_dtype(ctx, 2, 1);
  ctx.set_output(0, ctx.input_dtype(1), broadcast_inputs(ctx, 0, 3));
}

void expect_scalar(const InferenceContext& ctx, int i) {
  const Shape& s = ctx.input_shape(i);
  if (s.is_static() && *s.numel() != 1)
    ctx.fail(fmt("input ", i, " has shape ", to_string(s), ", expected a scalar"));
}

// Clip-11+: optional scalar inputs min and max of x's dtype. Clip-6: attributes instead.
void infer_clip(InferenceContext& ctx) {
  expect_types(ctx, 0, Types::kNumeric);
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.node().opset() < 11) ctx.fail(fmt("has input ", i, "; before opset 11 min and max are attributes"));
    expect_same_dtype(ctx, i, 0);
    expect_scalar(ctx, i);
  }
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

void infer_cast(InferenceContext& ctx) { ctx.set_output(0, cast_target_dtype(ctx.node()), ctx.input_shape(0)); }

// CastLike(x, target_type): x converted to target_type's dtype.
void infer_cast_like(InferenceContext& ctx) { ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0)); }

void infer_gelu(InferenceContext& ctx) {
  const std::string approximate = ctx.node().attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    ctx.fail(fmt("attribute approximate is '", approximate, "', expected 'none' or 'tanh'"));
  infer_unary<Types::kFloat>(ctx);
}

// IsNaN, IsInf: a bool per element of a float tensor.
void infer_float_class(InferenceContext& ctx) {
  expect_types(ctx, 0, Types::kFloat);
  ctx.set_output(0, DType::kBool, ctx.input_shape(0));
}

void add_unary(OpRegistry& r, const char* name, InferFn infer) {
  r.add({.domain = "", .name = name, .min_inputs = 1, .max_inputs = 1, .infer = infer, .inplace = {{0, 0}}});
}

void add_binary(OpRegistry& r, const char* name, InferFn infer) {
  r.add({.domain = "", .name = name, .min_inputs = 2, .max_inputs = 2, .infer = infer, .inplace = {{0, 0}, {1, 0}}});
}

void add_variadic(OpRegistry& r, const char* name, InferFn infer) {
  r.add({.domain = "", .name = name, .min_inputs = 1, .max_inputs = OpSchema::kVariadic, .infer = infer,
         .inplace = {{0, 0}, {1, 0}}});
}

}  // namespace

void register_elementwise_schemas(OpRegistry& r) {
  r.add({.domain = "", .name = "Identity", .min_inputs = 1, .max_inputs = 1, .infer = infer_unary<Types::kAll>,
         .inplace = {{0, 0}}, .is_view = true});
  add_unary(r, "Neg", infer_unary<Types::kSigned>);
  add_unary(r, "Abs", infer_unary<Types::kNumeric>);
  add_unary(r, "Sign", infer_unary<Types::kNumeric>);
  add_unary(r, "Relu", infer_unary<Types::kSigned>);
  add_unary(r, "Not", infer_unary<Types::kBool>);
  add_unary(r, "BitwiseNot", infer_unary<Types::kInteger>);
  for (const char* name : {"IsNaN", "IsInf"})  // bool outputs: no in-place alias
    r.add({.domain = "", .name = name, .min_inputs = 1, .max_inputs = 1, .infer = infer_float_class});
  for (const char* name : {"Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sigmoid", "Tanh", "Erf",
                           "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                           "Softplus", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu"})
    add_unary(r, name, infer_unary<Types::kFloat>);
  add_unary(r, "Gelu", infer_gelu);
  add_unary(r, "Cast", infer_cast);
  r.add({.domain = "", .name = "CastLike", .min_inputs = 2, .max_inputs = 2, .infer = infer_cast_like,
         .inplace = {{0, 0}}});
  r.add({.domain = "", .name = "Clip", .min_inputs = 1, .max_inputs = 3, .infer = infer_clip, .inplace = {{0, 0}}});

  for (const char* name : {"Add", "Sub", "Mul", "Div"}) add_binary(r, name, infer_binary<Types::kNumeric, false>);
  add_binary(r, "Pow", infer_pow);
  add_binary(r, "Mod", infer_binary<Types::kNumeric, false>);  // fmod 0 (sign of the divisor) or 1 (C fmod)
  add_binary(r, "Equal", infer_binary<Types::kAll, true>);
  for (const char* name : {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
    add_binary(r, name, infer_binary<Types::kNumeric, true>);
  for (const char* name : {"And", "Or", "Xor"}) add_binary(r, name, infer_binary<Types::kBool, false>);
  for (const char* name : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    add_binary(r, name, infer_binary<Types::kInteger, false>);

  for (const char* name : {"Sum", "Min", "Max"}) add_variadic(r, name, infer_variadic<Types::kNumeric>);
  add_variadic(r, "Mean", infer_variadic<Types::kFloat>);
  r.add({.domain = "", .name = "Where", .min_inputs = 3, .max_inputs = 3, .infer = infer_where,
         .inplace = {{1, 0}, {2, 0}}});
}

}  // namespace trainrt
