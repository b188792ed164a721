// ValidRows (ops/valid_rows.h): the rows a sparse loss keeps; the output was sized at run time from
// the same labels (the schema's inference), so the kernel only fills it.
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/valid_rows.h"

namespace trainrt {
namespace {

KernelFn make_valid_rows(const Node& node) {
  const int64_t ignore_index = node.attr_int("ignore_index", -100);
  return [ignore_index](KernelContext& ctx) { fill_valid_rows(ctx.in(0), ignore_index, ctx.out(0)); };
}

}  // namespace

void register_valid_rows_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "ValidRows", dtype_bit(DType::kI64) | dtype_bit(DType::kI32), make_valid_rows);
}

}  // namespace trainrt
