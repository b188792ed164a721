// GatherND, GatherNDGrad and ScatterND (ops/gather_nd_schema.cc): one slice copy (or add) per index
// tuple, in index order, so sums never depend on the thread count.
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Calls fn(tuple t, element offset of its slice in data, element offset of its slice in out) for
// every index tuple; `slice` gets the elements per slice. Throws ShapeError naming the node for a
// coordinate out of range or batch dims that differ.
template <typename Fn>
void for_each_tuple(const Node& node, const std::vector<int64_t>& data_dims, const Tensor& indices, int64_t& slice,
                    Fn fn) {
  const int64_t b = node.attr_int("batch_dims", 0);
  const int64_t k = indices.dim(indices.rank() - 1);
  const int64_t r = static_cast<int64_t>(data_dims.size());
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) {
    if (indices.dim(d) != data_dims[static_cast<size_t>(d)])
      throw ShapeError(fmt(node.describe(), ": batch dim ", d, " of indices (", indices.dim(d), ") and data (",
                           data_dims[static_cast<size_t>(d)], ") differ"));
    batches *= data_dims[static_cast<size_t>(d)];
  }
  slice = 1;
  for (int64_t d = b + k; d < r; ++d) slice *= data_dims[static_cast<size_t>(d)];
  int64_t batch_elems = slice;  // elements of data per batch
  for (int64_t d = b; d < b + k; ++d) batch_elems *= data_dims[static_cast<size_t>(d)];
  const int64_t tuples = indices.numel() / k, per_batch = batches ? tuples / batches : 0;
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t extent = data_dims[static_cast<size_t>(b + j)];
      int64_t i = idx[t * k + j];
      if (i < -extent || i >= extent)
        throw ShapeError(fmt(node.describe(), ": index ", i, " is out of range for data dim ", b + j, " of size ", extent));
      offset = offset * extent + (i < 0 ? i + extent : i);
    }
    fn(t, (t / per_batch) * batch_elems + offset * slice, t * slice);
  }
}

KernelFn make_gather_nd(const Node& node) {
  return [&node](KernelContext& ctx) {
    const Tensor& data = ctx.in(0);
    const size_t elem = dtype_size(data.dtype());
    const auto* src = static_cast<const std::byte*>(data.raw());
    auto* dst = static_cast<std::byte*>(ctx.out(0).raw());
    int64_t slice = 0;
    for_each_tuple(node, data.dims(), ctx.in(1), slice, [&](int64_t, int64_t from, int64_t to) {
      std::memcpy(dst + static_cast<size_t>(to) * elem, src + static_cast<size_t>(from) * elem,
                  static_cast<size_t>(slice) * elem);
    });
  };
}

template <typename T>
void gather_nd_grad(const Node& node, const Tensor& indices, const Tensor& dy, Tensor& dx) {
  T* d = dx.data<T>();
  const T* g = dy.data<T>();
  std::fill(d, d + dx.numel(), T(0));
  int64_t slice = 0;
  for_each_tuple(node, dx.dims(), indices, slice, [&](int64_t, int64_t to, int64_t from) {
    for (int64_t e = 0; e < slice; ++e) d[to + e] += g[from + e];
  });
}

KernelFn make_gather_nd_grad(const Node& node) {
  return [&node](KernelContext& ctx) {
    Tensor& dx = ctx.out(0);
    if (ctx.in(2).dtype() == DType::kF32) gather_nd_grad<float>(node, ctx.in(1), ctx.in(2), dx);
    else gather_nd_grad<double>(node, ctx.in(1), ctx.in(2), dx);
  };
}

// out[at] = combine(out[at], update) for reduction add, mul, max, min; in T's own arithmetic, f16 /
// bf16 in float rounded on each store, as torch's index_put with accumulate of those dtypes.
template <typename T>
void scatter_nd_reduce(const Node& node, const std::string& reduction, const Tensor& indices, const Tensor& updates,
                       Tensor& out) {
  using A = std::conditional_t<kIsFloat16<T>, float, T>;
  T* o = out.data<T>();
  const T* u = updates.data<T>();
  int64_t slice = 0;
  const auto apply = [&](auto combine) {
    for_each_tuple(node, out.dims(), indices, slice, [&](int64_t, int64_t to, int64_t from) {
      for (int64_t e = 0; e < slice; ++e) {
        if constexpr (kIsFloat16<T>)
          o[to + e] = from_compute<T>(combine(to_compute(o[to + e]), to_compute(u[from + e])));
        else
          o[to + e] = combine(o[to + e], u[from + e]);
      }
    });
  };
  if (reduction == "add") apply([](A a, A b) -> A { return a + b; });
  else if (reduction == "mul") apply([](A a, A b) -> A { return a * b; });
  else if (reduction == "max") apply([](A a, A b) { return a < b ? b : a; });
  else apply([](A a, A b) { return b < a ? b : a; });
}

KernelFn make_scatter_nd(const Node& node) {
  const std::string reduction = node.attr_string("reduction", "none");
  const bool add = reduction != "none";
  return [&node, add, reduction](KernelContext& ctx) {
    const Tensor& data = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.raw() != data.raw()) std::memcpy(out.raw(), data.raw(), data.nbytes());
    const Tensor& updates = ctx.in(2);
    if (add) {
      visit_dtype(data.dtype(), [&]<typename T>() {
        if constexpr (dtype_in<T>(kNumericTypes))
          scatter_nd_reduce<T>(node, reduction, ctx.in(1), updates, out);
        else
          throw UnsupportedOp(fmt(node.describe(), ": reduction ", reduction, " on dtype ", dtype_name(data.dtype())));
      });
      return;
    }
    const size_t elem = dtype_size(data.dtype());
    auto* dst = static_cast<std::byte*>(out.raw());
    const auto* src = static_cast<const std::byte*>(updates.raw());
    int64_t slice = 0;
    for_each_tuple(node, out.dims(), ctx.in(1), slice, [&](int64_t, int64_t to, int64_t from) {
      std::memcpy(dst + static_cast<size_t>(to) * elem, src + static_cast<size_t>(from) * elem,
                  static_cast<size_t>(slice) * elem);
    });
  };
}

}  // namespace

void register_gather_nd_kernels(KernelTable& t) {
  t.add("", "ScatterND", kAllTypes, make_scatter_nd);  // reductions refuse bool when they run
  t.add("", "GatherND", DType::kUndefined, make_gather_nd);
  t.add(kTrainrtDomain, "GatherNDGrad", DType::kI64, make_gather_nd_grad);  // keyed on the i64 shape
}

}  // namespace trainrt
