// CPU kernels of the reshape-like views (Reshape, Flatten, Squeeze, Unsqueeze), the ops that make
// values from shapes or attributes (Shape, Size, Constant, ConstantOfShape, Range) and Trilu; and
// the registration of the whole shape and data movement family.
#include "trainrt/kernels/cpu/tensor_kernels.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

// Reshape, Flatten, Squeeze, Unsqueeze: the output is the input's bytes under other dims. Their
// schemas allow in-place, and then there is nothing to copy.
KernelFn make_view(const Node&) {
  return [](KernelContext& ctx) {
    parallel_copy(ctx.out(0).raw(), ctx.in(0).raw(), ctx.in(0).nbytes(), ctx.threads());
  };
}

// Shape: dims [start, end) of the input; the output's length already says how many.
KernelFn make_shape(const Node& node) {
  const int64_t start = node.attr_int("start", 0);
  return [start](KernelContext& ctx) {
    const std::vector<int64_t>& dims = ctx.in(0).dims();
    const int64_t r = static_cast<int64_t>(dims.size());
    const int64_t first = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    Tensor& out = ctx.out(0);
    for (int64_t i = 0; i < out.numel(); ++i)
      out.data<int64_t>()[i] = dims[static_cast<size_t>(first + i)];
  };
}

KernelFn make_size(const Node&) {
  return [](KernelContext& ctx) { *ctx.out(0).data<int64_t>() = ctx.in(0).numel(); };
}

KernelFn make_constant(const Node& node) {
  Tensor value = constant_value(node);
  return [value, where = node.describe()](KernelContext& ctx) {
    Tensor& out = ctx.out(0);
    if (out.dtype() != value.dtype() || out.numel() != value.numel())
      throw InternalError(fmt(where, ": output ", describe(out), " does not fit the value ",
                              describe(value)));
    if (value.nbytes()) std::memcpy(out.raw(), value.raw(), value.nbytes());
  };
}

// Fills n elements of elem_size bytes with the pattern's first elem_size bytes.
void fill_elements(void* dst, int64_t n, const std::array<std::byte, 8>& pattern, size_t elem_size) {
  if (std::all_of(pattern.begin(), pattern.end(), [](std::byte b) { return b == std::byte{0}; })) {
    std::memset(dst, 0, static_cast<size_t>(n) * elem_size);
    return;
  }
  const auto fill = [&]<typename U>() {
    U v;
    std::memcpy(&v, pattern.data(), sizeof(U));
    std::fill_n(static_cast<U*>(dst), n, v);
  };
  switch (elem_size) {
    case 1: return fill.operator()<uint8_t>();
    case 2: return fill.operator()<uint16_t>();
    case 4: return fill.operator()<uint32_t>();
    default: return fill.operator()<uint64_t>();
  }
}

// ConstantOfShape: every element is the one element of attribute `value` (default f32 0).
KernelFn make_constant_of_shape(const Node& node) {
  std::array<std::byte, 8> pattern{};
  size_t elem_size = sizeof(float);
  if (const Tensor* v = node.attr_tensor("value")) {
    if (v->numel() != 1)
      throw InvalidModel(fmt(node.describe(), ": attribute 'value' must hold one element, it is ",
                             describe(*v)));
    elem_size = dtype_size(v->dtype());
    std::memcpy(pattern.data(), v->raw(), elem_size);
  }
  return [pattern, elem_size](KernelContext& ctx) {
    fill_elements(ctx.out(0).raw(), ctx.out(0).numel(), pattern, elem_size);
  };
}

// Range: out[i] = start + i * delta (ONNX Range-11), computed in the element type like numpy's
// arange, in f32 for the 16-bit floats.
KernelFn make_range(const Node&) {
  return [](KernelContext& ctx) {
    const Tensor &start = ctx.in(0), &delta = ctx.in(2);
    Tensor& out = ctx.out(0);
    const int64_t n = out.numel();
    visit_dtype(out.dtype(), [&]<typename T>() {
      T* y = out.data<T>();
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        const float s = static_cast<float>(start.to_double(0));
        const float d = static_cast<float>(delta.to_double(0));
        for (int64_t i = 0; i < n; ++i) {
          const float v = s + static_cast<float>(i) * d;
          y[i] = T{std::is_same_v<T, Half> ? f32_to_f16(v) : f32_to_bf16(v)};
        }
      } else if constexpr (std::is_same_v<T, bool>) {
        throw UnsupportedOp("Range has no bool kernel");
      } else if constexpr (std::is_integral_v<T>) {
        const int64_t s = start.to_i64(0), d = delta.to_i64(0);
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(s + i * d);
      } else {
        const T s = *start.data<T>(), d = *delta.data<T>();
        for (int64_t i = 0; i < n; ++i) y[i] = s + static_cast<T>(i) * d;
      }
    });
  };
}

// Trilu: keeps, in each (rows, cols) matrix of the last two dims, the elements with
// j - i >= k (upper) or j - i <= k (lower), zeroing the others. Zero bytes are zero in every dtype.
KernelFn make_trilu(const Node& node) {
  const bool upper = node.attr_int("upper", 1) != 0;
  return [upper](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    const int64_t rows = x.dim(-2), cols = x.dim(-1);
    if (x.numel() == 0) return;
    // Beyond +-(rows + cols) every k keeps all or nothing; clamping avoids overflow in i + k.
    const int64_t k_in = ctx.has_in(1) ? ctx.in(1).to_i64(0) : 0;
    const int64_t k = std::clamp<int64_t>(k_in, -(rows + cols), rows + cols);
    const size_t es = dtype_size(x.dtype());
    const size_t row_bytes = static_cast<size_t>(cols) * es;
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    auto rows_range = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t i = r % rows;
        const int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        const int64_t hi = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        std::byte* d = dst + static_cast<size_t>(r) * row_bytes;
        const std::byte* s = src + static_cast<size_t>(r) * row_bytes;
        std::memset(d, 0, static_cast<size_t>(lo) * es);
        std::memcpy(d + lo * es, s + lo * es, static_cast<size_t>(hi - lo) * es);  // lo <= hi
        std::memset(d + hi * es, 0, static_cast<size_t>(cols - hi) * es);
      }
    };
    ctx.threads().parallel_for(x.numel() / cols, rows_per_chunk(row_bytes), rows_range);
  };
}

}  // namespace

void register_tensor_kernels(KernelTable& t) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
    t.add("", op, DType::kUndefined, make_view);
  t.add("", "Shape", DType::kUndefined, make_shape);
  t.add("", "Size", DType::kUndefined, make_size);
  t.add("", "Constant", DType::kUndefined, make_constant);
  t.add("", "ConstantOfShape", DType::kUndefined, make_constant_of_shape);
  t.add("", "Range", kNumericTypes, make_range);
  t.add("", "Trilu", DType::kUndefined, make_trilu);
  register_select_kernels(t);
  register_transpose_kernels(t);
  register_dropout_kernels(t);
  register_random_kernels(t);
  register_gather_elements_kernels(t);
  register_cumsum_kernels(t);
  register_valid_rows_kernels(t);
  register_gather_nd_kernels(t);
  register_arg_reduce_kernels(t);
  register_pad_kernels(t);
  register_top_k_kernels(t);
  register_resize_kernels(t);
  register_dft_kernels(t);
  register_non_zero_kernels(t);
}

}  // namespace trainrt
