// CPU kernels of Gather, Concat, Split and Slice: block copies between tensors viewed as
// (outer, axis, inner), for any element type.
#include <cstring>

#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

// A tensor's dims as (outer, axis, inner) around `axis`.
struct AxisView {
  int64_t outer = 1, axis = 1, inner = 1;
};
AxisView view_around(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    const int64_t d = dims[static_cast<size_t>(i)];
    if (i < axis) v.outer *= d;
    else if (i == axis) v.axis = d;
    else v.inner *= d;
  }
  return v;
}

int64_t wrap_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// memcpy with the common small sizes (one element of 1-8 bytes) inlined.
inline void copy_bytes(std::byte* dst, const std::byte* src, size_t n) {
  switch (n) {
    case 1: std::memcpy(dst, src, 1); break;
    case 2: std::memcpy(dst, src, 2); break;
    case 4: std::memcpy(dst, src, 4); break;
    case 8: std::memcpy(dst, src, 8); break;
    default: std::memcpy(dst, src, n);
  }
}

// data viewed as (outer, axis_dim, inner) and indices (n) -> out (outer, n, inner).
template <typename I>
void gather(const Tensor& data, const I* indices, int64_t n, int64_t axis, Tensor& out, ThreadPool& pool,
            const std::string& where) {
  const AxisView v = view_around(data.dims(), axis);
  // Checked up front, so the parallel copy below cannot fail half way.
  for (int64_t j = 0; j < n; ++j) {
    const int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < -v.axis || idx >= v.axis)
      throw ShapeError(fmt(where, ": index ", idx, " (position ", j,
                           " of input 1) is out of range for axis ", axis, " of input 0 ", describe(data)));
  }
  if (out.numel() == 0) return;
  const size_t row = static_cast<size_t>(v.inner) * dtype_size(data.dtype());
  const auto* src = static_cast<const std::byte*>(data.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  pool.parallel_for(v.outer * n, rows_per_chunk(row), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / n;
      int64_t idx = static_cast<int64_t>(indices[t % n]);
      if (idx < 0) idx += v.axis;
      const std::byte* from = src + static_cast<size_t>(o * v.axis + idx) * row;
      copy_bytes(dst + static_cast<size_t>(t) * row, from, row);
    }
  });
}

KernelFn make_gather(const Node& node) {
  const int64_t axis = node.attr_int("axis", 0);
  return [axis, where = node.describe()](KernelContext& ctx) {
    const Tensor &data = ctx.in(0), &indices = ctx.in(1);
    const int64_t a = wrap_axis(axis, data.rank());
    if (indices.dtype() == DType::kI64)
      gather(data, indices.data<int64_t>(), indices.numel(), a, ctx.out(0), ctx.threads(), where);
    else
      gather(data, indices.data<int32_t>(), indices.numel(), a, ctx.out(0), ctx.threads(), where);
  };
}

// Each output row (outer index) is the inputs' rows one after the other.
KernelFn make_concat(const Node& node) {
  const int64_t axis = node.attr_int("axis", 1);
  return [axis](KernelContext& ctx) {
    Tensor& out = ctx.out(0);
    const int64_t a = wrap_axis(axis, out.rank());
    const AxisView v = view_around(out.dims(), a);
    const size_t inner_bytes = static_cast<size_t>(v.inner) * dtype_size(out.dtype());
    const size_t out_row = static_cast<size_t>(v.axis) * inner_bytes;
    size_t offset = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Tensor& in = ctx.in(static_cast<int>(i));
      const size_t in_row = static_cast<size_t>(in.dim(a)) * inner_bytes;
      copy_rows(in.raw(), in_row, static_cast<std::byte*>(out.raw()) + offset, out_row, v.outer, in_row,
                ctx.threads());
      offset += in_row;
    }
  };
}

// Split sizes come from input 1 (opset >= 13), attribute `split` (before), or equal parts.
KernelFn make_split(const Node& node) {
  const int64_t axis = node.attr_int("axis", 0);
  const bool has_split_attr = node.has_attr("split");
  const std::vector<int64_t> split_attr = node.attr_ints("split", {});
  const int64_t parts = node.num_outputs();
  return [=, where = node.describe()](KernelContext& ctx) {
    const Tensor& in = ctx.in(0);
    const int64_t a = wrap_axis(axis, in.rank());
    const AxisView v = view_around(in.dims(), a);
    const std::vector<int64_t> sizes = ctx.has_in(1) ? ctx.in(1).to_i64_vector()
                                       : has_split_attr ? split_attr
                                                        : equal_split_sizes(where, v.axis, parts);
    const size_t inner_bytes = static_cast<size_t>(v.inner) * dtype_size(in.dtype());
    const size_t in_row = static_cast<size_t>(v.axis) * inner_bytes;
    size_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t out_row = static_cast<size_t>(sizes[i]) * inner_bytes;
      const int o = static_cast<int>(i);
      if (ctx.has_out(o))
        copy_rows(static_cast<const std::byte*>(in.raw()) + offset, in_row, ctx.out(o).raw(), out_row,
                  v.outer, out_row, ctx.threads());
      offset += out_row;
    }
  };
}

// Slice: one strided copy from the first selected element, with each sliced axis' stride
// multiplied by its step (negative steps walk backwards).
KernelFn make_slice(const Node& node) {
  const bool from_inputs = node.num_inputs() > 1;
  SliceArgs attr_args;
  if (!from_inputs) {
    attr_args.starts = node.attr_ints("starts", {});
    attr_args.ends = node.attr_ints("ends", {});
    attr_args.axes = node.attr_ints("axes", {});
  }
  return [from_inputs, attr_args, where = node.describe()](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.numel() == 0) return;
    SliceArgs args = attr_args;
    if (from_inputs) {
      args.starts = ctx.in(1).to_i64_vector();
      args.ends = ctx.in(2).to_i64_vector();
      if (ctx.has_in(3)) args.axes = ctx.in(3).to_i64_vector();
      if (ctx.has_in(4)) args.steps = ctx.in(4).to_i64_vector();
    }
    normalize_slice_args(where, args, x.rank());
    const std::vector<int64_t> in_strides = contiguous_strides(x.dims());
    std::vector<int64_t> strides = in_strides;
    int64_t offset = 0;
    for (size_t i = 0; i < args.axes.size(); ++i) {
      const size_t a = static_cast<size_t>(args.axes[i]);
      const SliceAxis s = slice_axis(x.dims()[a], args.starts[i], args.ends[i], args.steps[i]);
      offset += s.start * in_strides[a];
      strides[a] = in_strides[a] * s.step;
    }
    const size_t es = dtype_size(x.dtype());
    const std::byte* first = static_cast<const std::byte*>(x.raw()) + offset * static_cast<int64_t>(es);
    strided_copy(first, out.raw(), out.dims(), std::move(strides), es, ctx.threads());
  };
}

}  // namespace

void register_select_kernels(KernelTable& t) {
  t.add("", "Gather", DType::kUndefined, make_gather);
  t.add(kTrainrtDomain, "Embedding", DType::kUndefined, make_gather);  // rows: Gather on axis 0
  t.add("", "Concat", DType::kUndefined, make_concat);
  t.add("", "Split", DType::kUndefined, make_split);
  t.add("", "Slice", DType::kUndefined, make_slice);
}

}  // namespace trainrt
