// InstanceNormalization and InstanceNormalizationGrad (ops/batch_norm_schemas.cc), one (n, c) plane
// of S = d1 * ... * dk elements at a time, planes in parallel:
//   mean, var = the plane's mean and biased variance (sums in f64), r = 1 / sqrt(var + epsilon)
//   y = (x - mean) * r * scale[c] + B[c]
//   g = dy * scale[c], xhat = (x - mean) * r
//   dx = r * (g - mean(g) - xhat * mean(g * xhat))
//   dScale[c] = sum over n and the plane of dy * xhat, dB[c] = sum of dy
// The per-channel sums add the planes' partial sums in batch order, so they do not depend on the
// thread count. GroupNorm (capture/ops_norm.py) is this on (N, G, C / G * S) with unit scale.
#include <cmath>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

struct Plane {
  double mean = 0, rstd = 0;
};

template <typename T>
Plane statistics(const T* x, int64_t s, double epsilon) {
  double sum = 0;
  for (int64_t i = 0; i < s; ++i) sum += x[i];
  const double mean = s ? sum / static_cast<double>(s) : 0.0;
  double sq = 0;
  for (int64_t i = 0; i < s; ++i) sq += (x[i] - mean) * (x[i] - mean);
  return {mean, 1.0 / std::sqrt((s ? sq / static_cast<double>(s) : 0.0) + epsilon)};
}

// (planes N * C, channels C, plane size S) of X.
struct Layout {
  int64_t planes, channels, size;
};

Layout layout(const Tensor& x) {
  int64_t size = 1;
  for (int64_t d = 2; d < x.rank(); ++d) size *= x.dim(d);
  return {x.dim(0) * x.dim(1), x.dim(1), size};
}

template <typename T>
KernelFn make_instance_norm(const Node& node) {
  const double epsilon = node.attr_float("epsilon", 1e-5f);
  return [epsilon](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    const Layout l = layout(x);
    const T* xd = x.data<T>();
    T* yd = ctx.out(0).data<T>();
    ctx.threads().parallel_for(l.planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.size)),
                               [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const T* xp = xd + p * l.size;
        T* yp = yd + p * l.size;
        const Plane st = statistics(xp, l.size, epsilon);
        const int64_t c = p % l.channels;
        const T a = static_cast<T>(st.rstd * scale[c]);
        const T b = static_cast<T>(bias[c] - st.mean * st.rstd * scale[c]);
        for (int64_t i = 0; i < l.size; ++i) yp[i] = xp[i] * a + b;
      }
    });
  };
}

template <typename T>
KernelFn make_instance_norm_grad(const Node& node) {
  const double epsilon = node.attr_float("epsilon", 1e-5f);
  return [epsilon](KernelContext& ctx) {
    const Tensor& x = ctx.in(1);
    const T* dy = ctx.in(0).data<T>();
    const T* xd = x.data<T>();
    const T* scale = ctx.in(2).data<T>();
    const Layout l = layout(x);
    T* dx = ctx.has_out(0) ? ctx.out(0).data<T>() : nullptr;
    std::vector<double> dscale(static_cast<size_t>(l.planes)), dbias(static_cast<size_t>(l.planes));
    ctx.threads().parallel_for(l.planes, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, l.size)),
                               [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const T* xp = xd + p * l.size;
        const T* gp = dy + p * l.size;
        const Plane st = statistics(xp, l.size, epsilon);
        double sum_dy = 0, sum_dy_xhat = 0;
        for (int64_t i = 0; i < l.size; ++i) {
          sum_dy += gp[i];
          sum_dy_xhat += gp[i] * (xp[i] - st.mean) * st.rstd;
        }
        dscale[static_cast<size_t>(p)] = sum_dy_xhat;
        dbias[static_cast<size_t>(p)] = sum_dy;
        if (!dx) continue;
        const double s = static_cast<double>(scale[p % l.channels]), n = static_cast<double>(l.size);
        const double mean_g = s * sum_dy / n, mean_gx = s * sum_dy_xhat / n;
        T* dxp = dx + p * l.size;
        for (int64_t i = 0; i < l.size; ++i) {
          const double xhat = (xp[i] - st.mean) * st.rstd;
          dxp[i] = static_cast<T>(st.rstd * (s * gp[i] - mean_g - xhat * mean_gx));
        }
      }
    });
    for (int o = 1; o <= 2; ++o) {
      if (!ctx.has_out(o)) continue;
      const std::vector<double>& partial = o == 1 ? dscale : dbias;
      T* out = ctx.out(o).data<T>();
      for (int64_t c = 0; c < l.channels; ++c) {
        double sum = 0;
        for (int64_t p = c; p < l.planes; p += l.channels) sum += partial[static_cast<size_t>(p)];
        out[c] = static_cast<T>(sum);
      }
    }
  };
}

}  // namespace

void register_instance_norm_kernels(KernelTable& t) {
  t.add("", "InstanceNormalization", DType::kF32, make_instance_norm<float>);
  t.add("", "InstanceNormalization", DType::kF64, make_instance_norm<double>);
  t.add(kTrainrtDomain, "InstanceNormalizationGrad", DType::kF32, make_instance_norm_grad<float>);
  t.add(kTrainrtDomain, "InstanceNormalizationGrad", DType::kF64, make_instance_norm_grad<double>);
}

}  // namespace trainrt
