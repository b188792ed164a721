#include "trainrt/kernels/cpu/elementwise_kernels.h"

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"

namespace trainrt {

void throw_unsupported_dtype(const Node& node, std::string_view which, DType t) {
  throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for ", which, " of dtype ", dtype_name(t)));
}

DType input_dtype(const Node& node, int i) {
  const Value* v = node.input(i);
  if (!v) throw InvalidModel(fmt(node.describe(), ": input ", i, " is required but missing"));
  return v->dtype;
}

void register_elementwise_kernels(KernelTable& t) {
  register_unary_kernels(t);
  register_binary_kernels(t);
  register_cast_kernels(t);
}

}  // namespace trainrt
