// CPU kernel of Dropout (ONNX Dropout-13): in training mode output = x * mask / (1 - ratio) with
// mask[i] = uniform(i) >= ratio; otherwise (inference, ratio 0, or opsets 7 to 11, which have no
// training mode) output = x and mask = all true.
//
// The uniforms are counter based (counter_rng.h), keyed by the node's `seed` attribute when it has
// one, else the per-run KernelContext::random_seed: the parallel chunks draw exactly what a serial
// loop would, whatever the thread count, and one seed always gives one mask.
#include <algorithm>
#include <cstring>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/counter_rng.h"
#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

constexpr int64_t kBlock = 1024;  // elements whose keep flags live on the stack at once

TRAINRT_SIMD_CLONES void apply_f32(const float* x, float* y, const bool* keep, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = keep[i] ? x[i] * scale : 0.f;
}

template <typename T>
void apply(const T* x, T* y, const bool* keep, int64_t n, double scale) {
  if constexpr (std::is_same_v<T, float>) {
    apply_f32(x, y, keep, n, static_cast<float>(scale));
  } else if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) y[i] = keep[i] ? x[i] * scale : 0.0;
  } else {
    constexpr bool kHalf = std::is_same_v<T, Half>;
    const float s = static_cast<float>(scale);
    for (int64_t i = 0; i < n; ++i) {
      const float v = keep[i] ? (kHalf ? f16_to_f32(x[i].bits) : bf16_to_f32(x[i].bits)) * s : 0.f;
      y[i] = T{kHalf ? f32_to_f16(v) : f32_to_bf16(v)};
    }
  }
}

// The mask output when nothing is dropped: true, or 1 in the data type (opsets before 10).
void fill_mask_ones(Tensor& mask) {
  visit_dtype(mask.dtype(), [&]<typename T>() {
    T one;
    if constexpr (std::is_same_v<T, Half>) one = Half{f32_to_f16(1.f)};
    else if constexpr (std::is_same_v<T, BFloat16>) one = BFloat16{f32_to_bf16(1.f)};
    else one = T(1);
    std::fill_n(mask.data<T>(), mask.numel(), one);
  });
}

template <typename T>
void dropout_train(const Tensor& x, Tensor& y, Tensor* mask, double ratio, uint64_t seed,
                   ThreadPool& pool) {
  const uint64_t key = stream_key(seed);
  const uint64_t threshold = keep_threshold(ratio);
  const double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  bool* pm = mask ? mask->data<bool>() : nullptr;
  pool.parallel_for(x.numel(), 16 * kBlock, [&](int64_t begin, int64_t end) {
    bool keep[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      draw_keep(key, b, b + n, threshold, keep);
      apply(px + b, py + b, keep, n, scale);
      if (pm) std::memcpy(pm + b, keep, static_cast<size_t>(n));
    }
  });
}

KernelFn make_dropout(const Node& node) {
  // Dropout-1 and -6 trained unless is_test was set, with a mask in the data type: too old to be
  // worth a second mask path.
  if (opset_below(node, 7) && node.attr_int("is_test", 0) == 0)
    throw UnsupportedOp(
        fmt(node.describe(), ": training-mode Dropout before opset 7 (is_test = 0) is not supported"));
  const bool has_training_mode = !opset_below(node, 12);
  const float ratio_attr = node.attr_float("ratio", 0.5f);
  const bool has_seed = node.has_attr("seed");
  const uint64_t seed_attr = static_cast<uint64_t>(node.attr_int("seed", 0));
  return [=, where = node.describe()](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    Tensor* mask = ctx.has_out(1) ? &ctx.out(1) : nullptr;
    const double ratio = ctx.has_in(1) ? ctx.in(1).to_double(0) : ratio_attr;
    const bool training = has_training_mode && ctx.has_in(2) && ctx.in(2).data<bool>()[0];
    if (!training || ratio == 0) {
      parallel_copy(y.raw(), x.raw(), x.nbytes(), ctx.threads());
      if (mask) fill_mask_ones(*mask);
      return;
    }
    if (!(ratio >= 0 && ratio <= 1))
      throw InvalidModel(fmt(where, ": ratio ", ratio, " is outside [0, 1]"));
    if (mask && mask->dtype() != DType::kBool)
      throw InternalError(fmt(where, ": training mode needs a bool mask, got ", describe(*mask)));
    const uint64_t seed = has_seed ? seed_attr : ctx.random_seed;
    visit_dtype(x.dtype(), [&]<typename T>() {
      constexpr bool kFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                              std::is_same_v<T, BFloat16>;
      if constexpr (kFloat)
        dropout_train<T>(x, y, mask, ratio, seed, ctx.threads());
      else
        throw UnsupportedOp(fmt(where, ": no CPU kernel for dtype ", dtype_name(x.dtype())));
    });
  };
}

}  // namespace

void register_dropout_kernels(KernelTable& t) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64})
    t.add("", "Dropout", d, make_dropout);
}

}  // namespace trainrt
