// CumSum: running sums along one axis (ONNX CumSum-14, torch.cumsum). x is viewed as
// (outer, n, inner) around the axis; each outer slab walks its n rows in order (reversed for
// reverse=1) keeping `inner` running sums, so the inner loop is contiguous and vectorizes. Sums
// are kept in the element type, as torch does for f32 and the integer types.
#include <algorithm>
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

struct ScanGeometry {
  int64_t outer, n, inner;
  bool exclusive, reverse;
};

// One slab: x and y point at its (n, inner) elements.
template <typename T>
void scan_slab(const T* x, T* y, const ScanGeometry& g) {
  const int64_t inner = g.inner;
  for (int64_t step = 0; step < g.n; ++step) {
    const int64_t row = g.reverse ? g.n - 1 - step : step;
    const T* xr = x + row * inner;
    T* yr = y + row * inner;
    if (step == 0) {
      if (g.exclusive) std::fill(yr, yr + inner, T{0});
      else std::copy(xr, xr + inner, yr);
      continue;
    }
    const int64_t prev = g.reverse ? row + 1 : row - 1;
    const T* yp = y + prev * inner;
    // exclusive: y[row] = y[prev] + x[prev]; inclusive: y[row] = y[prev] + x[row].
    const T* add = g.exclusive ? x + prev * inner : xr;
    for (int64_t i = 0; i < inner; ++i) yr[i] = yp[i] + add[i];
  }
}

template <typename T>
void cumsum(const Tensor& x, Tensor& y, const ScanGeometry& g, ThreadPool& threads) {
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  const int64_t slab = g.n * g.inner;
  threads.parallel_for(g.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(slab, 1)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t o = begin; o < end; ++o) scan_slab(src + o * slab, dst + o * slab, g);
                       });
}

KernelFn make_cumsum(const Node& node) {
  const bool exclusive = node.attr_int("exclusive", 0) != 0;
  const bool reverse = node.attr_int("reverse", 0) != 0;
  return [&node, exclusive, reverse](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const int64_t rank = x.rank();
    int64_t axis = ctx.in(1).to_i64(0);
    if (axis < -rank || axis >= rank)
      throw ShapeError(fmt(node.describe(), ": axis ", axis, " is out of range for input 0 of rank ", rank));
    if (axis < 0) axis += rank;
    ScanGeometry g{1, x.dim(axis), 1, exclusive, reverse};
    for (int64_t d = 0; d < axis; ++d) g.outer *= x.dim(d);
    for (int64_t d = axis + 1; d < rank; ++d) g.inner *= x.dim(d);
    if (x.numel() == 0) return;
    switch (x.dtype()) {
      case DType::kF32: return cumsum<float>(x, ctx.out(0), g, ctx.threads());
      case DType::kF64: return cumsum<double>(x, ctx.out(0), g, ctx.threads());
      case DType::kI32: return cumsum<int32_t>(x, ctx.out(0), g, ctx.threads());
      case DType::kI64: return cumsum<int64_t>(x, ctx.out(0), g, ctx.threads());
      default:
        throw UnsupportedOp(fmt(node.describe(), ": input 0 has dtype ", dtype_name(x.dtype()),
                                ", expected f32, f64, i32 or i64"));
    }
  };
}

}  // namespace

// bf16 / f16 CumSum runs widened (runtime/bf16_widening.h): sums in f32, each output rounded once, as
// torch's cumsum of those dtypes accumulates in float.
void register_cumsum_kernels(KernelTable& t) {
  t.add("", "CumSum", dtype_bit(DType::kF32) | dtype_bit(DType::kF64) | dtype_bit(DType::kI32) | dtype_bit(DType::kI64),
        make_cumsum);
}

}  // namespace trainrt
