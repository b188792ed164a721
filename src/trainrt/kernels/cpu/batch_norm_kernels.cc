// CPU kernels of BatchNormalization (ONNX opset 15) and BatchNormalizationGrad (TrainRT domain).
//
// X (N, C, d1, ..., dk) is seen as (N, C, S), S = d1 * ... * dk (1 for rank 2): channel c owns the
// N rows x[n, c, :] of S contiguous values, M = N * S values in all. Per channel:
//   training  mean = sum x / M, var = sum (x - mean)^2 / M (biased; two passes, no cancellation)
//   eval      mean = input_mean, var = input_var
//   inv_std = 1 / sqrt(var + epsilon),  Y = (x - mean) * (scale * inv_std) + B
//   running_mean = input_mean * momentum + mean * (1 - momentum), running_var likewise (training)
// The backward (PyTorch batch_norm_backward; xhat = (x - mean) * inv_std, k = scale * inv_std):
//   dBias = sum dy,  dScale = sum dy * xhat
//   training  dX = k * (dy - dBias / M - xhat * dScale / M)
//   eval      dX = k * dy                           (an affine map of fixed statistics)
// BatchNormalizationGrad(dY, X, scale, [mean, inv_std]) reads the channel statistics from inputs
// 3 and 4 when given (required in eval mode: the running mean and its inv_std); in training mode
// without them it computes the batch's from X exactly as the forward does.
// Channel sums accumulate each row in the compute type (vectorized) and rows in double. With
// S > 1 the work is split over channels; with S == 1 (BatchNorm1d on (N, C)) a channel is a
// strided column, so statistics walk rows of C and the elementwise pass is split over rows.
// f32 and f64.
#include <algorithm>
#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// ---- Row helpers (vectorized per target) ----

// y = (x - mean) * a + b.
template <typename T>
inline void normalize_row_t(const T* x, T* y, T mean, T a, T b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * a + b;
}
TRAINRT_SIMD_CLONES void normalize_channel_row(const float* x, float* y, float mean, float a, float b, int64_t n) {
  normalize_row_t(x, y, mean, a, b, n);
}
TRAINRT_SIMD_CLONES void normalize_channel_row(const double* x, double* y, double mean, double a, double b,
                                               int64_t n) {
  normalize_row_t(x, y, mean, a, b, n);
}

// sum dy * (x - mean), in 16 independent lanes so it vectorizes.
template <typename T>
inline T centered_dot_t(const T* dy, const T* x, T mean, int64_t n) {
  T lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += dy[i + j] * (x[i + j] - mean);
  T sum = 0;
  for (; i < n; ++i) sum += dy[i] * (x[i] - mean);
  for (T l : lanes) sum += l;
  return sum;
}
TRAINRT_SIMD_CLONES float centered_dot(const float* dy, const float* x, float mean, int64_t n) {
  return centered_dot_t(dy, x, mean, n);
}
TRAINRT_SIMD_CLONES double centered_dot(const double* dy, const double* x, double mean, int64_t n) {
  return centered_dot_t(dy, x, mean, n);
}

// dx = a * dy + b * (x - mean) + c.
template <typename T>
inline void grad_row_t(const T* dy, const T* x, T* dx, T mean, T a, T b, T c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = a * dy[i] + b * (x[i] - mean) + c;
}
TRAINRT_SIMD_CLONES void grad_channel_row(const float* dy, const float* x, float* dx, float mean, float a, float b,
                                          float c, int64_t n) {
  grad_row_t(dy, x, dx, mean, a, b, c, n);
}
TRAINRT_SIMD_CLONES void grad_channel_row(const double* dy, const double* x, double* dx, double mean, double a,
                                          double b, double c, int64_t n) {
  grad_row_t(dy, x, dx, mean, a, b, c, n);
}

// ---- Layout and statistics ----

struct Layout {
  int64_t n = 0, c = 0, s = 1;
  int64_t per_channel() const { return n * s; }
  int64_t row(int64_t b, int64_t ch) const { return (b * c + ch) * s; }  // offset of x[b, ch, :]
};

Layout layout_of(const std::string& node, const Tensor& x, int input) {
  if (x.rank() < 2)
    throw ShapeError(fmt(node, ": input ", input, " has shape ", to_string(x.dims()), ", expected (N, C, d1, ..., dk)"));
  Layout l{.n = x.dims()[0], .c = x.dims()[1]};
  l.s = l.n * l.c == 0 ? 0 : x.numel() / (l.n * l.c);
  return l;
}

// Fails unless input i of the node is a (C) vector.
void expect_channels(const std::string& node, const KernelContext& ctx, int i, const char* name, const Layout& l) {
  if (ctx.in(i).rank() != 1 || ctx.in(i).dims()[0] != l.c)
    throw ShapeError(fmt(node, ": input ", i, " (", name, ") has shape ", to_string(ctx.in(i).dims()),
                         ", expected (", l.c, ") for the ", l.c, " channels of X"));
}

// Batch mean and biased variance of every channel of x (the training-mode statistics).
template <typename T>
void batch_stats(const T* x, const Layout& l, double* mean, double* var, ThreadPool& pool) {
  const double m = static_cast<double>(l.per_channel());
  if (l.s == 1) {  // columns of an (N, C) matrix: walk rows, each channel's sums in double
    std::fill(mean, mean + l.c, 0.0);
    std::fill(var, var + l.c, 0.0);
    for (int64_t b = 0; b < l.n; ++b)
      for (int64_t ch = 0; ch < l.c; ++ch) mean[ch] += static_cast<double>(x[b * l.c + ch]);
    for (int64_t ch = 0; ch < l.c; ++ch) mean[ch] /= m;
    for (int64_t b = 0; b < l.n; ++b)
      for (int64_t ch = 0; ch < l.c; ++ch) {
        const double d = static_cast<double>(x[b * l.c + ch]) - mean[ch];
        var[ch] += d * d;
      }
    for (int64_t ch = 0; ch < l.c; ++ch) var[ch] /= m;
    return;
  }
  pool.parallel_for(l.c, rows_per_task(l.per_channel()), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      double sum = 0, ssd = 0;
      for (int64_t b = 0; b < l.n; ++b) sum += static_cast<double>(row_sum(x + l.row(b, ch), l.s));
      const double mu = sum / m;
      for (int64_t b = 0; b < l.n; ++b) ssd += static_cast<double>(row_sum_sq_dev(x + l.row(b, ch), l.s, static_cast<T>(mu)));
      mean[ch] = mu;
      var[ch] = ssd / m;
    }
  });
}

// y = (x - mean[c]) * a[c] + b[c] over the whole tensor.
template <typename T>
void normalize_channels(const T* x, T* y, const Layout& l, const T* mean, const T* a, const T* b, ThreadPool& pool) {
  if (l.s == 1) {
    pool.parallel_for(l.n, rows_per_task(l.c), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t ch = 0; ch < l.c; ++ch) y[r * l.c + ch] = (x[r * l.c + ch] - mean[ch]) * a[ch] + b[ch];
    });
    return;
  }
  pool.parallel_for(l.n * l.c, rows_per_task(l.s), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t ch = r % l.c;
      normalize_channel_row(x + r * l.s, y + r * l.s, mean[ch], a[ch], b[ch], l.s);
    }
  });
}

// ---- BatchNormalization ----

struct BatchNormSpec {
  std::string node;
  double epsilon = 1e-5;
  double momentum = 0.9;
  bool training = false;
};

template <typename T>
void batch_norm(const BatchNormSpec& s, KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Layout l = layout_of(s.node, x, 0);
  const char* names[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 1; i <= 4; ++i) expect_channels(s.node, ctx, i, names[i - 1], l);
  if (s.training && l.per_channel() == 0)
    throw ShapeError(fmt(s.node, ": input 0 of shape ", to_string(x.dims()),
                         " has no values per channel to take batch statistics from"));
  const T* scale = ctx.in(1).data<T>();
  const T* bias = ctx.in(2).data<T>();
  const T* in_mean = ctx.in(3).data<T>();
  const T* in_var = ctx.in(4).data<T>();
  double* mean = scratch<double>(0, 2 * l.c);
  double* var = mean + l.c;
  if (s.training) {
    batch_stats(x.data<T>(), l, mean, var, ctx.threads());
  } else {
    for (int64_t ch = 0; ch < l.c; ++ch) {
      mean[ch] = static_cast<double>(in_mean[ch]);
      var[ch] = static_cast<double>(in_var[ch]);
    }
  }
  T* params = scratch<T>(1, 2 * l.c);  // (mean, scale * inv_std) per channel in T
  for (int64_t ch = 0; ch < l.c; ++ch) {
    params[ch] = static_cast<T>(mean[ch]);
    params[l.c + ch] = static_cast<T>(static_cast<double>(scale[ch]) / std::sqrt(var[ch] + s.epsilon));
  }
  normalize_channels(x.data<T>(), ctx.out(0).data<T>(), l, params, params + l.c, bias, ctx.threads());
  if (!s.training) return;
  for (int64_t ch = 0; ch < l.c; ++ch) {
    if (ctx.has_out(1))
      ctx.out(1).data<T>()[ch] = static_cast<T>(in_mean[ch] * s.momentum + mean[ch] * (1 - s.momentum));
    if (ctx.has_out(2))
      ctx.out(2).data<T>()[ch] = static_cast<T>(in_var[ch] * s.momentum + var[ch] * (1 - s.momentum));
  }
}

template <typename T>
KernelFn make_batch_norm(const Node& node) {
  BatchNormSpec s{.node = node.describe(),
                  .epsilon = node.attr_float("epsilon", 1e-5f),
                  .momentum = node.attr_float("momentum", 0.9f),
                  .training = node.attr_int("training_mode", 0) != 0};
  return [s](KernelContext& ctx) { batch_norm<T>(s, ctx); };
}

// ---- BatchNormalizationGrad ----

// Per channel: sum dy and sum dy * (x - mean), in double.
template <typename T>
void grad_sums(const T* dy, const T* x, const Layout& l, const double* mean, double* sum_dy, double* sum_dy_xc,
               ThreadPool& pool) {
  if (l.s == 1) {
    std::fill(sum_dy, sum_dy + l.c, 0.0);
    std::fill(sum_dy_xc, sum_dy_xc + l.c, 0.0);
    for (int64_t b = 0; b < l.n; ++b)
      for (int64_t ch = 0; ch < l.c; ++ch) {
        const double g = static_cast<double>(dy[b * l.c + ch]);
        sum_dy[ch] += g;
        sum_dy_xc[ch] += g * (static_cast<double>(x[b * l.c + ch]) - mean[ch]);
      }
    return;
  }
  pool.parallel_for(l.c, rows_per_task(l.per_channel()), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      double a = 0, b = 0;
      const T mu = static_cast<T>(mean[ch]);
      for (int64_t r = 0; r < l.n; ++r) {
        a += static_cast<double>(row_sum(dy + l.row(r, ch), l.s));
        b += static_cast<double>(centered_dot(dy + l.row(r, ch), x + l.row(r, ch), mu, l.s));
      }
      sum_dy[ch] = a;
      sum_dy_xc[ch] = b;
    }
  });
}

// dx = a[c] * dy + b[c] * (x - mean[c]) + k[c] over the whole tensor.
template <typename T>
void grad_channels(const T* dy, const T* x, T* dx, const Layout& l, const T* mean, const T* a, const T* b,
                   const T* k, ThreadPool& pool) {
  if (l.s == 1) {
    pool.parallel_for(l.n, rows_per_task(l.c), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t ch = 0; ch < l.c; ++ch) {
          const int64_t i = r * l.c + ch;
          dx[i] = a[ch] * dy[i] + b[ch] * (x[i] - mean[ch]) + k[ch];
        }
    });
    return;
  }
  pool.parallel_for(l.n * l.c, rows_per_task(l.s), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t ch = r % l.c;
      grad_channel_row(dy + r * l.s, x + r * l.s, dx + r * l.s, mean[ch], a[ch], b[ch], k[ch], l.s);
    }
  });
}

template <typename T>
void batch_norm_grad(const BatchNormSpec& s, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  if (dy.dims() != x.dims())
    throw ShapeError(fmt(s.node, ": input 0 (dY) has shape ", to_string(dy.dims()), ", input 1 (X) has shape ",
                         to_string(x.dims()), "; they must match"));
  const Layout l = layout_of(s.node, x, 1);
  expect_channels(s.node, ctx, 2, "scale", l);
  const bool given = ctx.has_in(3) && ctx.has_in(4);
  if (given) {
    expect_channels(s.node, ctx, 3, "mean", l);
    expect_channels(s.node, ctx, 4, "inv_std", l);
  } else if (!s.training) {
    throw ShapeError(fmt(s.node, ": inputs 3 (mean) and 4 (inv_std) are required in eval mode"));
  }
  double* mean = scratch<double>(0, 4 * l.c);
  double* inv_std = mean + l.c;
  double* sum_dy = mean + 2 * l.c;
  double* sum_dy_xc = mean + 3 * l.c;
  if (given) {
    for (int64_t ch = 0; ch < l.c; ++ch) {
      mean[ch] = ctx.in(3).to_double(ch);
      inv_std[ch] = ctx.in(4).to_double(ch);
    }
  } else {
    batch_stats(x.data<T>(), l, mean, inv_std, ctx.threads());
    for (int64_t ch = 0; ch < l.c; ++ch) inv_std[ch] = 1.0 / std::sqrt(inv_std[ch] + s.epsilon);
  }
  grad_sums(dy.data<T>(), x.data<T>(), l, mean, sum_dy, sum_dy_xc, ctx.threads());
  const T* scale = ctx.in(2).data<T>();
  if (ctx.has_out(0)) {
    const double m = static_cast<double>(l.per_channel());
    T* coef = scratch<T>(1, 4 * l.c);  // (mean, a, b, k) per channel
    for (int64_t ch = 0; ch < l.c; ++ch) {
      const double a = static_cast<double>(scale[ch]) * inv_std[ch];
      coef[ch] = static_cast<T>(mean[ch]);
      coef[l.c + ch] = static_cast<T>(a);
      // training: -a * xhat * mean(dy * xhat) - a * mean(dy), with xhat = (x - mean) * inv_std
      coef[2 * l.c + ch] = static_cast<T>(s.training ? -a * inv_std[ch] * inv_std[ch] * sum_dy_xc[ch] / m : 0.0);
      coef[3 * l.c + ch] = static_cast<T>(s.training ? -a * sum_dy[ch] / m : 0.0);
    }
    grad_channels(dy.data<T>(), x.data<T>(), ctx.out(0).data<T>(), l, coef, coef + l.c, coef + 2 * l.c,
                  coef + 3 * l.c, ctx.threads());
  }
  for (int64_t ch = 0; ch < l.c; ++ch) {
    if (ctx.has_out(1)) ctx.out(1).data<T>()[ch] = static_cast<T>(sum_dy_xc[ch] * inv_std[ch]);
    if (ctx.has_out(2)) ctx.out(2).data<T>()[ch] = static_cast<T>(sum_dy[ch]);
  }
}

template <typename T>
KernelFn make_batch_norm_grad(const Node& node) {
  BatchNormSpec s{.node = node.describe(),
                  .epsilon = node.attr_float("epsilon", 1e-5f),
                  .training = node.attr_int("training_mode", 0) != 0};
  return [s](KernelContext& ctx) { batch_norm_grad<T>(s, ctx); };
}

}  // namespace

void register_batch_norm_kernels(KernelTable& t) {
  t.add("", "BatchNormalization", DType::kF32, make_batch_norm<float>);
  t.add("", "BatchNormalization", DType::kF64, make_batch_norm<double>);
  t.add(kTrainrtDomain, "BatchNormalizationGrad", DType::kF32, make_batch_norm_grad<float>);
  t.add(kTrainrtDomain, "BatchNormalizationGrad", DType::kF64, make_batch_norm_grad<double>);
}

}  // namespace trainrt
