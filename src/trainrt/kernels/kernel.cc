#include "trainrt/kernels/kernel.h"

#include "trainrt/core/error.h"

namespace trainrt {

void KernelTable::add(std::string_view domain, std::string_view op, DType dtype, KernelFactory f) {
  factories_[{std::string(domain), std::string(op), dtype}] = f;
}

void KernelTable::add(std::string_view domain, std::string_view op, DTypeSet dtypes, KernelFactory f) {
  for (unsigned bit = 0; bit < 8 * sizeof(DTypeSet); ++bit)  // the set's own dtypes: no list to keep in step
    if (dtypes & (DTypeSet{1} << bit)) add(domain, op, static_cast<DType>(bit), f);
}

const KernelFactory* KernelTable::find(const std::string& domain, const std::string& op,
                                       DType dtype) const {
  const std::string d = domain == "ai.onnx" ? std::string() : domain;
  auto it = factories_.find({d, op, dtype});
  if (it == factories_.end()) it = factories_.find({d, op, DType::kUndefined});
  return it == factories_.end() ? nullptr : &it->second;
}

bool KernelTable::supports(const std::string& domain, const std::string& op) const {
  const std::string d = domain == "ai.onnx" ? std::string() : domain;
  auto it = factories_.lower_bound({d, op, DType::kUndefined});
  return it != factories_.end() && std::get<0>(it->first) == d && std::get<1>(it->first) == op;
}

void KernelTable::add_row_ranges(std::string_view domain, std::string_view op, DType dtype) {
  row_ranges_.insert({std::string(domain), std::string(op), dtype});
}

bool KernelTable::computes_row_ranges(const Node& node) const {
  const std::string d = node.domain() == "ai.onnx" ? std::string() : node.domain();
  return row_ranges_.count({d, node.op_type(), key_dtype(node)}) > 0;
}

DType KernelTable::key_dtype(const Node& node) {
  for (Value* v : node.inputs())
    if (v) return v->dtype;
  for (Value* v : node.outputs())
    if (v) return v->dtype;
  return DType::kUndefined;
}

KernelFn KernelTable::create(const Node& node) const {
  DType t = key_dtype(node);
  const KernelFactory* f = find(node.domain(), node.op_type(), t);
  if (!f)
    throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for dtype ", dtype_name(t)));
  return (*f)(node);
}

}  // namespace trainrt
