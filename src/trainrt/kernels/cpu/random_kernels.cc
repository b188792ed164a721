// CPU kernels of the random ops (ops/random_schemas.cc): RandomUniform(Like) writes
// low + (high - low) * u, RandomNormal(Like) mean + scale * z with z from two uniforms
// (Box-Muller), Bernoulli u < p ? 1 : 0, for each element's uniforms u of the counter stream
// (counter_rng.h) keyed by the `seed` attribute or the run's KernelContext::random_seed: parallel
// chunks draw what a serial loop would, whatever the thread count.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/kernels/cpu/counter_rng.h"
#include "trainrt/kernels/cpu/tensor_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

constexpr int64_t kBlock = 512;  // elements whose uniforms live on the stack at once

enum class Draw { kUniform, kNormal, kBernoulli };

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) return Half{f32_to_f16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16{f32_to_bf16(static_cast<float>(v))};
  else return static_cast<T>(v);
}

// Element i of y from its uniforms: uniform and Bernoulli read uniform i, normal uniforms 2i, 2i+1.
template <typename T>
void draw(Draw kind, uint64_t key, double a, double b, const Tensor* p, Tensor& y, ThreadPool& pool) {
  T* out = y.data<T>();
  pool.parallel_for(y.numel(), 16 * kBlock, [&](int64_t begin, int64_t end) {
    double u[2 * kBlock];
    for (int64_t c = begin; c < end; c += kBlock) {
      const int64_t n = std::min(kBlock, end - c);
      if (kind == Draw::kNormal) {
        draw_uniform(key, 2 * c, 2 * (c + n), u);
        for (int64_t i = 0; i < n; ++i) {
          const double z = std::sqrt(-2.0 * std::log1p(-u[2 * i])) * std::cos(2.0 * std::numbers::pi * u[2 * i + 1]);
          out[c + i] = from_double<T>(a + b * z);  // a: mean, b: scale
        }
        continue;
      }
      draw_uniform(key, c, c + n, u);
      for (int64_t i = 0; i < n; ++i)
        out[c + i] = from_double<T>(kind == Draw::kUniform ? a + (b - a) * u[i]  // a: low, b: high
                                                           : (u[i] < p->to_double(c + i) ? 1.0 : 0.0));
    }
  });
}

KernelFn make_random(const Node& node, Draw kind) {
  const bool has_seed = node.has_attr("seed");
  const uint64_t seed_attr = static_cast<uint64_t>(static_cast<int64_t>(node.attr_float("seed", 0.f)));
  const double a = kind == Draw::kNormal ? node.attr_float("mean", 0.f) : node.attr_float("low", 0.f);
  const double b = kind == Draw::kNormal ? node.attr_float("scale", 1.f) : node.attr_float("high", 1.f);
  return [=](KernelContext& ctx) {
    Tensor& y = ctx.out(0);
    const uint64_t key = stream_key(has_seed ? seed_attr : ctx.random_seed);
    const Tensor* p = kind == Draw::kBernoulli ? &ctx.in(0) : nullptr;
    visit_dtype(y.dtype(), [&]<typename T>() { draw<T>(kind, key, a, b, p, y, ctx.threads()); });
  };
}

KernelFn make_uniform(const Node& node) { return make_random(node, Draw::kUniform); }
KernelFn make_normal(const Node& node) { return make_random(node, Draw::kNormal); }
KernelFn make_bernoulli(const Node& node) { return make_random(node, Draw::kBernoulli); }

}  // namespace

void register_random_kernels(KernelTable& t) {
  // Keyed on the output's dtype (no inputs) or the input's, whose values only Bernoulli reads.
  t.add("", "RandomUniform", kFloatTypes, make_uniform);
  t.add("", "RandomNormal", kFloatTypes, make_normal);
  t.add("", "RandomUniformLike", kAllTypes, make_uniform);
  t.add("", "RandomNormalLike", kAllTypes, make_normal);
  t.add("", "Bernoulli", kFloatTypes, make_bernoulli);
}

}  // namespace trainrt
