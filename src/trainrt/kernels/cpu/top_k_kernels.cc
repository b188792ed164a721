// TopK (ops/top_k_schema.cc): per line along the axis, a stable partial sort of the positions by
// value (NaN first when largest, last when smallest, as torch), the first K written in order.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

KernelFn make_top_k(const Node& node) {
  const bool largest = node.attr_int("largest", 1) != 0;
  const int64_t axis_attr = node.attr_int("axis", -1);
  return [&node, largest, axis_attr](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int64_t k = ctx.in(1).to_i64(0);
    const int64_t axis = axis_attr < 0 ? axis_attr + x.rank() : axis_attr;
    const int64_t n = x.dim(axis);
    if (k < 0 || k > n) throw ShapeError(fmt(node.describe(), ": K = ", k, " is outside [0, ", n, "]"));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    int64_t* indices = ctx.out(1).data<int64_t>();
    const size_t elem = dtype_size(x.dtype());
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(ctx.out(0).raw());
    visit_dtype(x.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>) {
        throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for bool input"));
      } else {
        const T* p = x.data<T>();
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::vector<double> line(static_cast<size_t>(n));
        // a before b: larger (smaller) first, NaN counted as the largest, ties by position.
        const auto before = [&](int64_t a, int64_t b) {
          const double va = line[static_cast<size_t>(a)], vb = line[static_cast<size_t>(b)];
          const bool na = std::isnan(va), nb = std::isnan(vb);
          if (na || nb) return largest ? (na && !nb) : (!na && nb);
          return largest ? va > vb : va < vb;
        };
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t base = o * n * inner + i;
            for (int64_t j = 0; j < n; ++j) line[static_cast<size_t>(j)] = element_as_double(p[base + j * inner]);
            std::iota(order.begin(), order.end(), int64_t{0});
            std::stable_sort(order.begin(), order.end(), before);
            for (int64_t j = 0; j < k; ++j) {
              const int64_t at = o * k * inner + j * inner + i;
              indices[at] = order[static_cast<size_t>(j)];
              std::memcpy(dst + static_cast<size_t>(at) * elem,
                          src + static_cast<size_t>(base + order[static_cast<size_t>(j)] * inner) * elem, elem);
            }
          }
      }
    });
  };
}

}  // namespace

void register_top_k_kernels(KernelTable& t) { t.add("", "TopK", DType::kUndefined, make_top_k); }

}  // namespace trainrt
