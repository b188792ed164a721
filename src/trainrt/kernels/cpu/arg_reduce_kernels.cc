// ArgMax / ArgMin (ops/arg_reduce_schema.cc) over one axis: (outer, axis, inner) walked once, NaN
// counted as the largest and the smallest (torch's argmax and argmin return a NaN's index).
#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

KernelFn make_arg_reduce(const Node& node) {
  const bool max = node.op_type() == "ArgMax";
  const bool last = node.attr_int("select_last_index", 0) != 0;
  const int64_t axis_attr = node.attr_int("axis", 0);
  return [&node, max, last, axis_attr](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int64_t axis = axis_attr < 0 ? axis_attr + x.rank() : axis_attr;
    const int64_t n = x.dim(axis);
    if (n == 0) throw ShapeError(fmt(node.describe(), ": axis ", axis, " has no elements"));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    int64_t* out = ctx.out(0).data<int64_t>();
    visit_dtype(x.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>) {
        throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for bool input"));
      } else {
        const T* p = x.data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const T* row = p + o * n * inner + i;
            int64_t best = 0;
            double best_v = element_as_double(row[0]);
            for (int64_t j = 1; j < n && !std::isnan(best_v); ++j) {
              const double v = element_as_double(row[j * inner]);
              const bool better = std::isnan(v) || (max ? (last ? v >= best_v : v > best_v) : (last ? v <= best_v : v < best_v));
              if (better) best = j, best_v = v;
            }
            out[o * inner + i] = best;
          }
      }
    });
  };
}

}  // namespace

void register_arg_reduce_kernels(KernelTable& t) {
  t.add("", "ArgMax", kNumericTypes, make_arg_reduce);
  t.add("", "ArgMin", kNumericTypes, make_arg_reduce);
}

}  // namespace trainrt
