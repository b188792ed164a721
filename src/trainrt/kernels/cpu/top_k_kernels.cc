// TopK (ops/top_k_schema.cc): per line along the axis, a stable partial sort of the positions by
// value (NaN first when largest, last when smallest, as torch), the first K written in order.
//
// TopKInTorchOrder: the same selection, equal elements in the order torch's CPU topk leaves them.
// torch (aten/src/ATen/native/TopKImpl.h) fills (value, position) pairs and, with its comparator on
// the value alone (NaN first when largest), runs std::partial_sort of the first K when K * 64 <= n,
// else std::nth_element at K - 1 and, when sorted, std::sort of the first K - 1. The same standard
// algorithms with the same comparator on the same pairs move them the same way, so ties land where
// torch's land (tests compare the indices with torch's on lines of ties).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// a before b: larger (smaller) first, NaN counted as the largest; says nothing of ties.
template <typename V>
bool ranks_before(V a, V b, bool largest) {
  if constexpr (std::is_floating_point_v<V>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return largest ? (na && !nb) : (!na && nb);
  }
  return largest ? a > b : a < b;
}

// Positions of `line`'s values in order, ties by position.
template <typename V>
void order_by_position(const std::vector<V>& line, bool largest, std::vector<int64_t>& order) {
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ranks_before(line[static_cast<size_t>(a)], line[static_cast<size_t>(b)], largest);
  });
}

// Positions of the K first of `line` as torch's CPU topk orders them (see the file comment);
// `queue` is scratch of the line's length, kept across lines.
template <typename V>
void order_as_torch(const std::vector<V>& line, int64_t k, bool largest, bool sorted,
                    std::vector<std::pair<V, int64_t>>& queue, std::vector<int64_t>& order) {
  if (k == 0) return;
  for (size_t j = 0; j < line.size(); ++j) queue[j] = {line[j], static_cast<int64_t>(j)};
  const auto before = [largest](const std::pair<V, int64_t>& x, const std::pair<V, int64_t>& y) {
    return ranks_before(x.first, y.first, largest);
  };
  if (k * 64 <= static_cast<int64_t>(queue.size())) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), before);
  } else {
    std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), before);
    if (sorted) std::sort(queue.begin(), queue.begin() + k - 1, before);
  }
  for (int64_t j = 0; j < k; ++j) order[static_cast<size_t>(j)] = queue[static_cast<size_t>(j)].second;
}

// The value a line is ordered by: int64 as itself (a double would round past 2^53), the rest as
// double (exact for every other dtype, 16-bit floats widened from their bits).
template <typename T>
using LineValue = std::conditional_t<std::is_same_v<T, int64_t>, int64_t, double>;

KernelFn make_top_k_kernel(const Node& node, bool torch_order) {
  const bool largest = node.attr_int("largest", 1) != 0;
  const bool sorted = node.attr_int("sorted", 1) != 0;
  const int64_t axis_attr = node.attr_int("axis", -1);
  return [&node, largest, sorted, axis_attr, torch_order](KernelContext& ctx) {
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
        using V = LineValue<T>;
        const T* p = x.data<T>();
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::vector<V> line(static_cast<size_t>(n));
        std::vector<std::pair<V, int64_t>> queue(torch_order ? static_cast<size_t>(n) : 0);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t base = o * n * inner + i;
            for (int64_t j = 0; j < n; ++j) {
              if constexpr (std::is_same_v<V, int64_t>) line[static_cast<size_t>(j)] = p[base + j * inner];
              else line[static_cast<size_t>(j)] = element_as_double(p[base + j * inner]);
            }
            if (torch_order) order_as_torch(line, k, largest, sorted, queue, order);
            else order_by_position(line, largest, order);
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

KernelFn make_top_k(const Node& node) { return make_top_k_kernel(node, /*torch_order=*/false); }
KernelFn make_top_k_in_torch_order(const Node& node) { return make_top_k_kernel(node, /*torch_order=*/true); }

}  // namespace

void register_top_k_kernels(KernelTable& t) {
  t.add("", "TopK", kNumericTypes, make_top_k);
  t.add(kTrainrtDomain, "TopKInTorchOrder", kNumericTypes, make_top_k_in_torch_order);
}

}  // namespace trainrt
