#include "trainrt/ops/elementwise_args.h"

#include "trainrt/core/error.h"

namespace trainrt {

DType cast_target_dtype(const Node& node) {
  const Attribute* to = node.attr("to");
  if (!to) throw InvalidModel(fmt(node.describe(), ": attribute 'to' is required"));
  int code = -1;
  if (to->kind == Attribute::Kind::kInt) {
    code = static_cast<int>(to->i);
  } else if (to->kind == Attribute::Kind::kString) {  // Cast-1: the TensorProto type's name
    for (int c = 0; c < 64 && code < 0; ++c)
      if (onnx_dtype_name(c) == to->s) code = c;
    if (code < 0) throw InvalidModel(fmt(node.describe(), ": attribute 'to' names no ONNX type: '", to->s, "'"));
  } else {
    throw InvalidModel(fmt(node.describe(), ": attribute 'to' is a ", attribute_kind_name(to->kind),
                           ", expected an int"));
  }
  try {
    return dtype_from_onnx(code);
  } catch (const UnsupportedOp& e) {
    throw UnsupportedOp(fmt(node.describe(), ": attribute 'to': ", e.what()));
  }
}

int64_t legacy_broadcast_trailing_ones(const Node& node, int64_t rank_a, int64_t rank_b) {
  if (node.opset() >= 7 || node.attr_int("broadcast", 0) == 0 || !node.has_attr("axis")) return 0;
  const int64_t given = node.attr_int("axis", 0);
  const int64_t axis = given < 0 ? given + rank_a : given;
  if (axis < 0 || axis + rank_b > rank_a)
    throw ShapeError(fmt(node.describe(), ": broadcast axis ", given, " does not fit input 1 of rank ", rank_b,
                         " into input 0 of rank ", rank_a));
  return rank_a - axis - rank_b;
}

}  // namespace trainrt
