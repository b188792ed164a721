// GatherElements: each output element copies the data element found by replacing its own index
// along `axis` with the index tensor's value there (ONNX GatherElements; torch.gather).
// ScatterElements(data, indices, updates), its inverse: data with each update written (reduction
// none) or combined (add, mul, max, min) at the position GatherElements would have read it from.
// GatherElementsGrad(shape, indices, dY) -> dX, its gradient: dX (dims `shape`) starts at 0 and
// each dY element is added at the data position its forward element was copied from (repeated
// indices accumulate, as torch's gather backward, a scatter_add). One pass in index order, so the
// sums never depend on the thread count.
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Calls fn(e, offset) for each element e of `indices` with the row-major offset into data (dims
// data_dims) it names. Throws ShapeError for an index out of [-extent, extent) or an indices dim
// (other than the axis) larger than data's.
template <typename I, typename Fn>
void for_each_element(const Node& node, const std::vector<int64_t>& data_dims, const Tensor& indices, int64_t axis,
                      Fn fn) {
  const int64_t rank = static_cast<int64_t>(data_dims.size());
  // Row-major strides of data; the walk follows the index tensor's dims with an odometer.
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1), index(static_cast<size_t>(rank), 0);
  for (int64_t d = rank - 2; d >= 0; --d)
    stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d + 1)] * data_dims[static_cast<size_t>(d + 1)];
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.dim(d) > data_dims[static_cast<size_t>(d)])
      throw ShapeError(fmt(node.describe(), ": indices dim ", d, " (", indices.dim(d), ") exceeds data dim (",
                           data_dims[static_cast<size_t>(d)], ")"));
  const I* idx = indices.data<I>();
  const int64_t extent = data_dims[static_cast<size_t>(axis)];
  int64_t base = 0;  // data offset of the current index with the axis coordinate at 0
  for (int64_t e = 0; e < indices.numel(); ++e) {
    int64_t i = static_cast<int64_t>(idx[e]);
    if (i < -extent || i >= extent)
      throw ShapeError(fmt(node.describe(), ": index ", i, " is out of range for axis ", axis, " of size ", extent));
    if (i < 0) i += extent;
    fn(e, base + i * stride[static_cast<size_t>(axis)]);
    for (int64_t d = rank - 1; d >= 0; --d) {
      size_t k = static_cast<size_t>(d);
      if (d != axis) base += stride[k];
      if (++index[k] < indices.dim(d)) break;
      if (d != axis) base -= stride[k] * indices.dim(d);
      index[k] = 0;
    }
  }
}

// f(I) for the index dtype of `indices` (i64 or i32).
template <typename Fn>
void visit_index(const Tensor& indices, Fn f) {
  if (indices.dtype() == DType::kI64) f.template operator()<int64_t>();
  else f.template operator()<int32_t>();
}

KernelFn make_gather_elements(const Node& node) {
  const int64_t axis_attr = node.attr_int("axis", 0);
  return [&node, axis_attr](KernelContext& ctx) {
    const Tensor& data = ctx.in(0);
    const Tensor& indices = ctx.in(1);
    const int64_t axis = axis_attr < 0 ? axis_attr + data.rank() : axis_attr;
    const size_t elem = dtype_size(data.dtype());
    const auto* src = static_cast<const std::byte*>(data.raw());
    auto* dst = static_cast<std::byte*>(ctx.out(0).raw());
    visit_index(indices, [&]<typename I>() {
      for_each_element<I>(node, data.dims(), indices, axis, [&](int64_t e, int64_t offset) {
        std::memcpy(dst + static_cast<size_t>(e) * elem, src + static_cast<size_t>(offset) * elem, elem);
      });
    });
  };
}

// dX[offset of e] += dY[e], dX zeroed first; T is dY's dtype.
template <typename T>
void gather_elements_grad(const Node& node, const Tensor& indices, const Tensor& dy, int64_t axis, Tensor& dx) {
  T* d = dx.data<T>();
  const T* g = dy.data<T>();
  std::fill(d, d + dx.numel(), T(0));
  visit_index(indices, [&]<typename I>() {
    for_each_element<I>(node, dx.dims(), indices, axis, [&](int64_t e, int64_t offset) { d[offset] += g[e]; });
  });
}

KernelFn make_gather_elements_grad(const Node& node) {
  const int64_t axis_attr = node.attr_int("axis", 0);
  return [&node, axis_attr](KernelContext& ctx) {
    const Tensor& indices = ctx.in(1);
    const Tensor& dy = ctx.in(2);
    Tensor& dx = ctx.out(0);
    if (dy.dims() != indices.dims())
      throw ShapeError(fmt(node.describe(), ": input 2 (dY) has shape ", to_string(dy.dims()),
                           ", expected the indices' ", to_string(indices.dims())));
    const int64_t axis = axis_attr < 0 ? axis_attr + dx.rank() : axis_attr;
    if (dy.dtype() == DType::kF32) gather_elements_grad<float>(node, indices, dy, axis, dx);
    else gather_elements_grad<double>(node, indices, dy, axis, dx);  // the schema allows f32 and f64
  };
}

// Combines in T's own arithmetic; f16 / bf16 in float, rounded on each store, as torch's scatter
// of those dtypes.
template <typename T>
void scatter_elements(const Node& node, const std::string& reduction, const Tensor& indices, const Tensor& updates,
                      int64_t axis, Tensor& out) {
  using A = std::conditional_t<kIsFloat16<T>, float, T>;
  const auto load = [](T x) -> A {
    if constexpr (kIsFloat16<T>) return to_compute(x);
    else return x;
  };
  T* o = out.data<T>();
  const T* u = updates.data<T>();
  visit_index(indices, [&]<typename I>() {
    for_each_element<I>(node, out.dims(), indices, axis, [&](int64_t e, int64_t offset) {
      const A v = load(o[offset]), w = load(u[e]);
      A r = w;
      if (reduction == "add") r = v + w;
      else if (reduction == "mul") r = v * w;
      else if (reduction == "max") r = v < w ? w : v;
      else if (reduction == "min") r = w < v ? w : v;
      if constexpr (kIsFloat16<T>) o[offset] = from_compute<T>(r);
      else o[offset] = r;
    });
  });
}

KernelFn make_scatter_elements(const Node& node) {
  const int64_t axis_attr = node.attr_int("axis", 0);
  const std::string reduction = node.attr_string("reduction", "none");
  return [&node, axis_attr, reduction](KernelContext& ctx) {
    const Tensor& data = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.raw() != data.raw()) std::memcpy(out.raw(), data.raw(), data.nbytes());
    if (ctx.in(2).dims() != ctx.in(1).dims())
      throw ShapeError(fmt(node.describe(), ": updates have shape ", to_string(ctx.in(2).dims()), ", expected the indices' ",
                           to_string(ctx.in(1).dims())));
    const int64_t axis = axis_attr < 0 ? axis_attr + data.rank() : axis_attr;
    visit_dtype(data.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || kIsFloat16<T> ||
                    std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t> || std::is_same_v<T, int8_t> ||
                    std::is_same_v<T, uint8_t>)
        scatter_elements<T>(node, reduction, ctx.in(1), ctx.in(2), axis, out);
      else
        throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for dtype ", dtype_name(data.dtype())));
    });
  };
}

}  // namespace

void register_gather_elements_kernels(KernelTable& t) {
  t.add("", "ScatterElements", kNumericTypes, make_scatter_elements);
  t.add("", "GatherElements", DType::kUndefined, make_gather_elements);
  // Keyed on its first input, the i64 shape, as GatherGrad; the kernel dispatches on dY.
  t.add(kTrainrtDomain, "GatherElementsGrad", DType::kI64, make_gather_elements_grad);
}

}  // namespace trainrt
