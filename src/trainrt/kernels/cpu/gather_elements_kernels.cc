// GatherElements: each output element copies the data element found by replacing its own index
// along `axis` with the index tensor's value there (ONNX GatherElements; torch.gather).
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

template <typename I>
void gather_elements(const Node& node, const Tensor& data, const Tensor& indices, int64_t axis, Tensor& out) {
  const int64_t rank = data.rank();
  const size_t elem = dtype_size(data.dtype());
  // Row-major strides of data; the output walks the index tensor's dims with an odometer.
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1), index(static_cast<size_t>(rank), 0);
  for (int64_t d = rank - 2; d >= 0; --d) stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d + 1)] * data.dim(d + 1);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      throw ShapeError(fmt(node.describe(), ": indices dim ", d, " (", indices.dim(d), ") exceeds data dim (",
                           data.dim(d), ")"));
  const I* idx = indices.data<I>();
  const auto* src = static_cast<const std::byte*>(data.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  const int64_t extent = data.dim(axis);
  int64_t base = 0;  // data offset of the current index with the axis coordinate at 0
  for (int64_t e = 0; e < indices.numel(); ++e) {
    int64_t i = static_cast<int64_t>(idx[e]);
    if (i < -extent || i >= extent)
      throw ShapeError(fmt(node.describe(), ": index ", i, " is out of range for axis ", axis, " of size ", extent));
    if (i < 0) i += extent;
    std::memcpy(dst + static_cast<size_t>(e) * elem, src + static_cast<size_t>(base + i * stride[static_cast<size_t>(axis)]) * elem, elem);
    for (int64_t d = rank - 1; d >= 0; --d) {
      size_t k = static_cast<size_t>(d);
      if (d != axis) base += stride[k];
      if (++index[k] < indices.dim(d)) break;
      if (d != axis) base -= stride[k] * indices.dim(d);
      index[k] = 0;
    }
  }
}

KernelFn make_gather_elements(const Node& node) {
  const int64_t axis_attr = node.attr_int("axis", 0);
  return [&node, axis_attr](KernelContext& ctx) {
    const Tensor& data = ctx.in(0);
    const Tensor& indices = ctx.in(1);
    const int64_t axis = axis_attr < 0 ? axis_attr + data.rank() : axis_attr;
    if (indices.dtype() == DType::kI64) gather_elements<int64_t>(node, data, indices, axis, ctx.out(0));
    else gather_elements<int32_t>(node, data, indices, axis, ctx.out(0));
  };
}

}  // namespace

void register_gather_elements_kernels(KernelTable& t) {
  t.add("", "GatherElements", DType::kUndefined, make_gather_elements);
}

}  // namespace trainrt
