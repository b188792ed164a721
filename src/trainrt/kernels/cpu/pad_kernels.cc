// Pad and PadGrad (ops/pad_schema.cc): each output element's source index along every axis (or none,
// in constant mode's padding), walked row by row; the gradient adds in output order, so its sums do
// not depend on the thread count.
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

PadMode mode_of(const Node& node) {
  const std::string m = node.attr_string("mode", "constant");
  return m == "reflect" ? PadMode::kReflect : m == "edge" ? PadMode::kEdge : m == "wrap" ? PadMode::kWrap
                                                                             : PadMode::kConstant;
}

// Source index along an axis of size n for output position o (begin pads before): -1 for none.
int64_t source(int64_t o, int64_t begin, int64_t n, PadMode mode) {
  int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : n - 1;
    case PadMode::kWrap: return ((i % n) + n) % n;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      i = ((i % period) + period) % period;
      return i < n ? i : period - i;
    }
  }
  return -1;
}

// Per axis (begin) of rank r, from the pads and optional axes inputs.
std::vector<int64_t> begins(const Node& node, const Tensor& pads, const Tensor* axes_input, int64_t r) {
  std::vector<int64_t> axes;
  if (axes_input) {
    for (int64_t a : axes_input->to_i64_vector()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const std::vector<int64_t> v = pads.to_i64_vector();
  if (v.size() != 2 * axes.size()) throw ShapeError(fmt(node.describe(), ": pads has ", v.size(), " values"));
  std::vector<int64_t> b(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < axes.size(); ++i) b[static_cast<size_t>(axes[i])] = v[i];
  return b;
}

// fn(output element, source element or -1) for every output element in order.
template <typename Fn>
void for_each_source(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims,
                     const std::vector<int64_t>& begin, PadMode mode, Fn fn) {
  const size_t r = in_dims.size();
  std::vector<int64_t> in_stride(r, 1), index(r, 0);
  for (size_t d = r; d-- > 1;) in_stride[d - 1] = in_stride[d] * in_dims[d];
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  for (int64_t e = 0; e < total; ++e) {
    int64_t src = 0;
    for (size_t d = 0; d < r && src >= 0; ++d) {
      if (in_dims[d] == 0) { src = -1; break; }
      const int64_t s = source(index[d], begin[d], in_dims[d], mode);
      src = s < 0 ? -1 : src + s * in_stride[d];
    }
    fn(e, src);
    for (size_t d = r; d-- > 0;) {
      if (++index[d] < out_dims[d]) break;
      index[d] = 0;
    }
  }
}

KernelFn make_pad(const Node& node) {
  const PadMode mode = mode_of(node);
  return [&node, mode](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    const size_t elem = dtype_size(x.dtype());
    std::vector<std::byte> fill(elem);
    if (ctx.has_in(2) && ctx.in(2).numel() > 0) std::memcpy(fill.data(), ctx.in(2).raw(), elem);
    const Tensor* axes = ctx.has_in(3) ? &ctx.in(3) : nullptr;
    const auto b = begins(node, ctx.in(1), axes, x.rank());
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for_each_source(x.dims(), y.dims(), b, mode, [&](int64_t e, int64_t s) {
      std::memcpy(dst + static_cast<size_t>(e) * elem, s < 0 ? fill.data() : src + static_cast<size_t>(s) * elem, elem);
    });
  };
}

KernelFn make_pad_grad(const Node& node) {
  const PadMode mode = mode_of(node);
  return [&node, mode](KernelContext& ctx) {
    const Tensor& dy = ctx.in(0);
    Tensor& dx = ctx.out(0);
    const Tensor* axes = ctx.has_in(3) ? &ctx.in(3) : nullptr;
    const auto b = begins(node, ctx.in(2), axes, dx.rank());
    visit_dtype(dy.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* d = dx.data<T>();
        const T* g = dy.data<T>();
        std::fill(d, d + dx.numel(), T(0));
        for_each_source(dx.dims(), dy.dims(), b, mode, [&](int64_t e, int64_t s) {
          if (s >= 0) d[s] += g[e];
        });
      } else {
        throw UnsupportedOp(fmt(node.describe(), ": no CPU kernel for dY of dtype ", dtype_name(dy.dtype())));
      }
    });
  };
}

}  // namespace

void register_pad_kernels(KernelTable& t) {
  t.add("", "Pad", DType::kUndefined, make_pad);
  // bf16 / f16 dY runs widened (runtime/bf16_widening.h): sums in f32, rounded once.
  t.add(kTrainrtDomain, "PadGrad", dtype_bit(DType::kF32) | dtype_bit(DType::kF64), make_pad_grad);
}

}  // namespace trainrt
