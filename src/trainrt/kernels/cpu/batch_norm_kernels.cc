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
// Channel sums accumulate in vector lanes of the compute type, flushed into a double every ~2048
// values (channel_sums_t). With S > 1 the statistics are split over channels, a whole channel
// per call (a call per row costs more than a 4x4 map's row); the forward then writes Y in row
// order, the backward does all of a channel (mean, one pass for the variance and both gradient
// sums, dX) while it is in cache: on the CNN bench's shapes 1.4-1.9x faster than per-row calls and
// separate passes. With S == 1 (BatchNorm1d on (N, C)) a channel is a strided column, so
// statistics walk rows of C and the elementwise pass is split over rows. f32 and f64.
#include <algorithm>
#include <array>
#include <cmath>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// ---- Channel helpers (vectorized per target) ----
//
// Channel ch of X (N, C, S) is `rows` = N rows of s contiguous values, `stride` = C * S apart. The
// helpers take a whole channel per call: with S = 16 (a 4x4 feature map) a call per row would
// cost more than the row's work. Sums run in kLanes float lanes that are flushed into a double
// after the row that brings them to kFlush values, so a channel rounds about like kFlush-value
// float sums added in double, however its values are split into rows.

struct Channel {
  int64_t rows = 0, stride = 0, s = 0;
};

// Two AVX-512 registers of f32 lanes per sum: two independent add chains.
constexpr int kLanes = 32;
constexpr int64_t kFlush = 2048;

// sums[k] = sum over the channel of terms(i)[k] (offset i from the channel's start), k < K.
template <typename T, int K, typename Terms>
[[gnu::always_inline]] inline void channel_sums_t(const Channel& c, Terms terms, double* sums) {
  for (int k = 0; k < K; ++k) sums[k] = 0;
  T acc[K][kLanes] = {};
  int64_t pending = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t row = r * c.stride;
    int64_t i = 0;
    for (; i + kLanes <= c.s; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const auto t = terms(row + i + j);
        for (int k = 0; k < K; ++k) acc[k][j] += t[k];
      }
    for (; i + kLanes / 2 <= c.s; i += kLanes / 2)  // rows of 16 (4x4 maps) stay vectorized
      for (int j = 0; j < kLanes / 2; ++j) {
        const auto t = terms(row + i + j);
        for (int k = 0; k < K; ++k) acc[k][j] += t[k];
      }
    for (; i < c.s; ++i) {
      const auto t = terms(row + i);
      for (int k = 0; k < K; ++k) acc[k][i % kLanes] += t[k];
    }
    pending += c.s;
    if (pending >= kFlush || r + 1 == c.rows) {
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < kLanes; ++j) {
          sums[k] += static_cast<double>(acc[k][j]);
          acc[k][j] = 0;
        }
      pending = 0;
    }
  }
}

// sum x over the channel.
template <typename T>
[[gnu::always_inline]] inline double channel_sum_t(const T* x, const Channel& c) {
  double sum;
  channel_sums_t<T, 1>(c, [x](int64_t i) { return std::array<T, 1>{x[i]}; }, &sum);
  return sum;
}
TRAINRT_SIMD_CLONES double channel_sum(const float* x, Channel c) { return channel_sum_t(x, c); }
TRAINRT_SIMD_CLONES double channel_sum(const double* x, Channel c) { return channel_sum_t(x, c); }

// sum (x - mean)^2 over the channel.
template <typename T>
[[gnu::always_inline]] inline double channel_sum_sq_dev_t(const T* x, const Channel& c, T mean) {
  double sum;
  channel_sums_t<T, 1>(c, [x, mean](int64_t i) { return std::array<T, 1>{(x[i] - mean) * (x[i] - mean)}; }, &sum);
  return sum;
}
TRAINRT_SIMD_CLONES double channel_sum_sq_dev(const float* x, Channel c, float mean) {
  return channel_sum_sq_dev_t(x, c, mean);
}
TRAINRT_SIMD_CLONES double channel_sum_sq_dev(const double* x, Channel c, double mean) {
  return channel_sum_sq_dev_t(x, c, mean);
}

// The backward's sums in one pass: (sum (x - mean)^2, sum dy, sum dy * (x - mean)).
template <typename T>
[[gnu::always_inline]] inline void channel_grad_sums_t(const T* dy, const T* x, const Channel& c, T mean,
                                                       double* sums) {
  channel_sums_t<T, 3>(
      c,
      [dy, x, mean](int64_t i) {
        const T xc = x[i] - mean;
        return std::array<T, 3>{xc * xc, dy[i], dy[i] * xc};
      },
      sums);
}
TRAINRT_SIMD_CLONES void channel_grad_sums(const float* dy, const float* x, Channel c, float mean, double* sums) {
  channel_grad_sums_t(dy, x, c, mean, sums);
}
TRAINRT_SIMD_CLONES void channel_grad_sums(const double* dy, const double* x, Channel c, double mean, double* sums) {
  channel_grad_sums_t(dy, x, c, mean, sums);
}

// y = (x - mean[ch]) * a[ch] + b[ch] for rows [begin, end) of the N * C rows of s values, ch = row
// % C. Row order, not channel order: written in one sequential sweep, Y streams out faster than
// channel by channel when it does not fit in cache (measured on the 32x32 maps of the CNN stem).
template <typename T>
[[gnu::always_inline]] inline void normalize_rows_t(const T* x, T* y, int64_t begin, int64_t end, int64_t c,
                                                    int64_t s, const T* mean, const T* a, const T* b) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t ch = r % c;
    const T m = mean[ch], ar = a[ch], br = b[ch];
    for (int64_t i = 0; i < s; ++i) y[r * s + i] = (x[r * s + i] - m) * ar + br;
  }
}
TRAINRT_SIMD_CLONES void normalize_rows(const float* x, float* y, int64_t begin, int64_t end, int64_t c, int64_t s,
                                        const float* mean, const float* a, const float* b) {
  normalize_rows_t(x, y, begin, end, c, s, mean, a, b);
}
TRAINRT_SIMD_CLONES void normalize_rows(const double* x, double* y, int64_t begin, int64_t end, int64_t c, int64_t s,
                                        const double* mean, const double* a, const double* b) {
  normalize_rows_t(x, y, begin, end, c, s, mean, a, b);
}

// dx = a * dy + b * (x - mean) + k over the channel.
template <typename T>
[[gnu::always_inline]] inline void grad_channel_t(const T* dy, const T* x, T* dx, const Channel& c, T mean, T a, T b,
                                                  T k) {
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t o = r * c.stride;
    for (int64_t i = 0; i < c.s; ++i) dx[o + i] = a * dy[o + i] + b * (x[o + i] - mean) + k;
  }
}
TRAINRT_SIMD_CLONES void grad_channel(const float* dy, const float* x, float* dx, Channel c, float mean, float a,
                                      float b, float k) {
  grad_channel_t(dy, x, dx, c, mean, a, b, k);
}
TRAINRT_SIMD_CLONES void grad_channel(const double* dy, const double* x, double* dx, Channel c, double mean, double a,
                                      double b, double k) {
  grad_channel_t(dy, x, dx, c, mean, a, b, k);
}

// ---- Layout and statistics ----

struct Layout {
  int64_t n = 0, c = 0, s = 1;
  int64_t per_channel() const { return n * s; }
  int64_t row(int64_t b, int64_t ch) const { return (b * c + ch) * s; }  // offset of x[b, ch, :]
  Channel channel() const { return {.rows = n, .stride = c * s, .s = s}; }
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

// ---- (N, C) inputs (S == 1): a channel is a strided column, so walk rows of C ----

// Batch mean and biased variance of every column, in double.
template <typename T>
void column_stats(const T* x, const Layout& l, double* mean, double* var) {
  const double m = static_cast<double>(l.n);
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
}

// y = (x - mean[c]) * a[c] + b[c], split over rows.
template <typename T>
void normalize_columns(const T* x, T* y, const Layout& l, const T* mean, const T* a, const T* b, ThreadPool& pool) {
  pool.parallel_for(l.n, rows_per_task(l.c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t ch = 0; ch < l.c; ++ch) y[r * l.c + ch] = (x[r * l.c + ch] - mean[ch]) * a[ch] + b[ch];
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
  const T* xs = x.data<T>();
  T* ys = ctx.out(0).data<T>();
  if (s.training && l.s == 1) {
    column_stats(xs, l, mean, var);
  } else if (s.training) {
    const double m = static_cast<double>(l.per_channel());
    ctx.threads().parallel_for(l.c, rows_per_task(l.per_channel()), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const T* xc = xs + l.row(0, ch);
        mean[ch] = channel_sum(xc, l.channel()) / m;
        var[ch] = channel_sum_sq_dev(xc, l.channel(), static_cast<T>(mean[ch])) / m;
      }
    });
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
  if (l.s == 1) {
    normalize_columns(xs, ys, l, params, params + l.c, bias, ctx.threads());
  } else {
    ctx.threads().parallel_for(l.n * l.c, rows_per_task(l.s), [&](int64_t begin, int64_t end) {
      normalize_rows(xs, ys, begin, end, l.c, l.s, params, params + l.c, bias);
    });
  }
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

// Per column: sum dy and sum dy * (x - mean), in double.
template <typename T>
void column_grad_sums(const T* dy, const T* x, const Layout& l, const double* mean, double* sum_dy,
                      double* sum_dy_xc) {
  std::fill(sum_dy, sum_dy + l.c, 0.0);
  std::fill(sum_dy_xc, sum_dy_xc + l.c, 0.0);
  for (int64_t b = 0; b < l.n; ++b)
    for (int64_t ch = 0; ch < l.c; ++ch) {
      const double g = static_cast<double>(dy[b * l.c + ch]);
      sum_dy[ch] += g;
      sum_dy_xc[ch] += g * (static_cast<double>(x[b * l.c + ch]) - mean[ch]);
    }
}

// dx = a[c] * dy + b[c] * (x - mean[c]) + k[c], split over rows.
template <typename T>
void grad_columns(const T* dy, const T* x, T* dx, const Layout& l, const T* mean, const T* a, const T* b, const T* k,
                  ThreadPool& pool) {
  pool.parallel_for(l.n, rows_per_task(l.c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t ch = 0; ch < l.c; ++ch) {
        const int64_t i = r * l.c + ch;
        dx[i] = a[ch] * dy[i] + b[ch] * (x[i] - mean[ch]) + k[ch];
      }
  });
}

// dX's per-channel coefficients (a, b, k) of dx = a * dy + b * (x - mean) + k.
struct GradCoefficients {
  double a, b, k;
};
GradCoefficients grad_coefficients(bool training, double scale, double inv_std, double sum_dy, double sum_dy_xc,
                                   double m) {
  const double a = scale * inv_std;
  // training: -a * xhat * mean(dy * xhat) - a * mean(dy), with xhat = (x - mean) * inv_std
  if (!training) return {a, 0.0, 0.0};
  return {a, -a * inv_std * inv_std * sum_dy_xc / m, -a * sum_dy / m};
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
  }
  const T* dys = dy.data<T>();
  const T* xs = x.data<T>();
  T* dxs = ctx.has_out(0) ? ctx.out(0).data<T>() : nullptr;
  const T* scale = ctx.in(2).data<T>();
  const double m = static_cast<double>(l.per_channel());
  if (l.s == 1) {
    if (!given) {
      column_stats(xs, l, mean, inv_std);
      for (int64_t ch = 0; ch < l.c; ++ch) inv_std[ch] = 1.0 / std::sqrt(inv_std[ch] + s.epsilon);
    }
    column_grad_sums(dys, xs, l, mean, sum_dy, sum_dy_xc);
    if (dxs) {
      T* coef = scratch<T>(1, 4 * l.c);  // (mean, a, b, k) per channel
      for (int64_t ch = 0; ch < l.c; ++ch) {
        const GradCoefficients g = grad_coefficients(s.training, static_cast<double>(scale[ch]), inv_std[ch],
                                                     sum_dy[ch], sum_dy_xc[ch], m);
        coef[ch] = static_cast<T>(mean[ch]);
        coef[l.c + ch] = static_cast<T>(g.a);
        coef[2 * l.c + ch] = static_cast<T>(g.b);
        coef[3 * l.c + ch] = static_cast<T>(g.k);
      }
      grad_columns(dys, xs, dxs, l, coef, coef + l.c, coef + 2 * l.c, coef + 3 * l.c, ctx.threads());
    }
  } else {
    // A channel at a time: the mean (training), then the variance and both gradient sums in one
    // pass, then dX, while the channel's values are still in cache.
    ctx.threads().parallel_for(l.c, rows_per_task(l.per_channel()), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const Channel c = l.channel();
        const T* xc = xs + l.row(0, ch);
        const T* dyc = dys + l.row(0, ch);
        if (!given) mean[ch] = channel_sum(xc, c) / m;
        double sums[3];  // sum (x - mean)^2, sum dy, sum dy * (x - mean)
        channel_grad_sums(dyc, xc, c, static_cast<T>(mean[ch]), sums);
        if (!given) inv_std[ch] = 1.0 / std::sqrt(sums[0] / m + s.epsilon);
        sum_dy[ch] = sums[1];
        sum_dy_xc[ch] = sums[2];
        if (!dxs) continue;
        const GradCoefficients g =
            grad_coefficients(s.training, static_cast<double>(scale[ch]), inv_std[ch], sums[1], sums[2], m);
        grad_channel(dyc, xc, dxs + l.row(0, ch), c, static_cast<T>(mean[ch]), static_cast<T>(g.a),
                     static_cast<T>(g.b), static_cast<T>(g.k));
      }
    });
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
  register_instance_norm_kernels(t);
}

}  // namespace trainrt
