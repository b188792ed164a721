// CPU kernels of the TrainRT-domain gradient ops of the reduction family: ReduceSumToShape here,
// the others in the files listed in reduction_grad_kernels.h.
#include <cstring>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/reduction_grad_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// out[j] += x[j] for a row: the bias-gradient case (B, T, C) -> (C) sums rows like this.
template <typename T>
TRAINRT_SIMD_CLONES void add_row(compute_t<T>* __restrict out, const T* __restrict x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] += to_compute(x[j]);
}

// X (outer..., inner) summed to Y by broadcast rules, into `out` (Y's numel values of compute_t<T>,
// zeroed). Y's dims are right-aligned with X's; an axis of Y that is 1 (or missing) where X's is
// larger is summed over.
template <typename T>
void sum_to_shape(const Tensor& x, const std::vector<int64_t>& yd, compute_t<T>* out) {
  const auto& xd = x.dims();
  const int64_t rank = x.rank();
  const T* in = x.data<T>();
  if (x.numel() == 0) return;
  // Fast path: Y equals X's trailing block (only leading axes reduced): sum rows of length n.
  int64_t kept = rank;
  while (kept > 0 && yd[static_cast<size_t>(kept - 1)] == xd[static_cast<size_t>(kept - 1)]) --kept;
  bool leading_only = true;
  for (int64_t i = 0; i < kept; ++i) leading_only = leading_only && yd[static_cast<size_t>(i)] == 1;
  if (leading_only) {
    int64_t n = numel_of(yd);
    for (int64_t r = 0; r < x.numel() / n; ++r) add_row(out, in + r * n, n);
    return;
  }
  // General: walk X with an odometer, Y's strides are 0 on summed axes.
  std::vector<int64_t> ystride(static_cast<size_t>(rank), 0), index(static_cast<size_t>(rank), 0);
  int64_t s = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (yd[static_cast<size_t>(i)] != 1) ystride[static_cast<size_t>(i)] = s;
    s *= yd[static_cast<size_t>(i)];
  }
  int64_t offset = 0;
  for (int64_t e = 0; e < x.numel(); ++e) {
    out[offset] += to_compute(in[e]);
    for (int64_t i = rank - 1; i >= 0; --i) {
      size_t k = static_cast<size_t>(i);
      offset += ystride[k];
      if (++index[k] < xd[k]) break;
      offset -= ystride[k] * xd[k];
      index[k] = 0;
    }
  }
}

// Y = X summed to Y's shape. f16 and bf16 sum in f32 (a bias gradient adds up B * T rows: in bf16
// each addition would round) and are rounded once at the end.
template <typename T>
void reduce_sum_to_shape(const Tensor& x, Tensor& y) {
  const auto& xd = x.dims();
  const int64_t rank = x.rank();
  thread_local std::vector<int64_t> kept_yd;  // keeps its largest size: no steady-state allocation
  std::vector<int64_t>& yd = kept_yd;
  yd.assign(static_cast<size_t>(rank), 1);
  for (int64_t i = 0; i < y.rank(); ++i) yd[static_cast<size_t>(rank - y.rank() + i)] = y.dims()[static_cast<size_t>(i)];
  for (int64_t i = 0; i < rank; ++i)
    if (yd[static_cast<size_t>(i)] != 1 && yd[static_cast<size_t>(i)] != xd[static_cast<size_t>(i)])
      throw ShapeError(fmt("ReduceSumToShape: ", to_string(y.dims()), " does not broadcast to ", to_string(xd)));
  if constexpr (kIsFloat16<T>) {
    thread_local std::vector<float> sums;  // keeps its largest size: no allocation in steady state
    sums.assign(static_cast<size_t>(y.numel()), 0.f);
    sum_to_shape<T>(x, yd, sums.data());
    convert_from_f32(sums.data(), y.data<T>(), y.numel());
  } else {
    std::memset(static_cast<void*>(y.data<T>()), 0, y.nbytes());
    sum_to_shape<T>(x, yd, y.data<T>());
  }
}

KernelFn make_reduce_sum_to_shape(const Node& node) {
  return [&node](KernelContext& ctx) {
    switch (ctx.in(0).dtype()) {
      case DType::kF32: return reduce_sum_to_shape<float>(ctx.in(0), ctx.out(0));
      case DType::kF64: return reduce_sum_to_shape<double>(ctx.in(0), ctx.out(0));
      case DType::kF16: return reduce_sum_to_shape<Half>(ctx.in(0), ctx.out(0));
      case DType::kBF16: return reduce_sum_to_shape<BFloat16>(ctx.in(0), ctx.out(0));
      default:
        throw UnsupportedOp(fmt(node.describe(), ": dtype ", dtype_name(ctx.in(0).dtype()), " not supported"));
    }
  };
}

}  // namespace

void register_reduction_grad_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "ReduceSumToShape", DType::kF32, make_reduce_sum_to_shape);
  t.add(kTrainrtDomain, "ReduceSumToShape", DType::kF64, make_reduce_sum_to_shape);
  t.add(kTrainrtDomain, "ReduceSumToShape", DType::kF16, make_reduce_sum_to_shape);
  t.add(kTrainrtDomain, "ReduceSumToShape", DType::kBF16, make_reduce_sum_to_shape);
  register_softmax_grad_kernels(t);
  register_layer_norm_grad_kernels(t);
  register_loss_grad_kernels(t);
}

}  // namespace trainrt
