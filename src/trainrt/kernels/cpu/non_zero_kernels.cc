// NonZero (ops/non_zero.h): the output was sized at run time from the same input (the schema's
// inference), so the kernel only fills it.
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/non_zero.h"

namespace trainrt {
namespace {

KernelFn make_non_zero(const Node&) {
  return [](KernelContext& ctx) { fill_nonzero(ctx.in(0), ctx.out(0)); };
}

}  // namespace

void register_non_zero_kernels(KernelTable& t) { t.add("", "NonZero", kAllTypes, make_non_zero); }

}  // namespace trainrt
