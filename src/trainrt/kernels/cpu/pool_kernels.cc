// CPU kernels of MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool (ONNX opset 22) and of
// their gradient ops MaxPoolGrad and AveragePoolGrad (TrainRT domain).
//
// The windows come from ops/pool_geometry.h, walked as pool_windows.h says: 1-D and 2-D pools
// are run as 3-D ones with leading spatial dims of extent 1. Work is split over the N * C planes;
// each plane is walked window by window, each window over its in-bounds taps only (their range per
// dim computed up front, no per-tap bounds test), except f32 max and average pooling of 1 or 2
// spatial dims, vectorized along the output rows (max_pool_rows.h: same values and argmax;
// average_pool_rows.h: same sums in the same order, so the same bits), and the f32
// AveragePoolGrad of 1 or 2 spatial dims (average_pool_grad_rows.h: each dX element takes the
// same terms in the same order). A node keeps its windows for the next run: a run with the last
// run's shapes allocates nothing. Per window:
//   MaxPool      y = the largest tap; its index is the first largest in row-major order, a NaN
//                counting as larger than anything (PyTorch max_pool2d), so MaxPoolGrad routes
//                dY where torch does; only a window with several NaNs differs (ours: the first,
//                torch's CPU kernel: the last).
//                Indices: (n * C + c) * plane + the tap's offset within the plane, row major
//                (storage_order 0) or column major (1) as ONNX defines it.
//   AveragePool  y = sum of the in-bounds taps / count: count_include_pad=0 counts those taps,
//                1 also the taps on explicit or automatic padding (not those past it, which
//                ceil_mode can add: PyTorch avg_pool2d's divisor)
//   MaxPoolGrad(dY, X)          dX[argmax of window] += dY[window]  (argmax found again in X,
//                               which the backward reads anyway when another gradient reads X;
//                               saved int64 indices would add half of X's f32 bytes for a 2x2 pool)
//   AveragePoolGrad(dY, shape)  dX[tap] += dY[window] / count for every in-bounds tap
//   MaxPoolWithArgmax(X)        Y as MaxPool, and Argmax (u8): each window's first largest tap
//                               as its index among the window's kernel taps (row major over
//                               kernel_shape), 255 for a window wholly in padding
//   MaxPoolArgmaxGrad(dY, Argmax, shape)  dX[tap Argmax[window]] += dY[window]: MaxPoolGrad's
//                               sums in the same order, without X (plan/saved_values.h: the
//                               stem's ReLU output is then not saved, one byte per window instead)
// The global pools reduce each contiguous plane with the vectorized row reductions.
// MaxPool: f32, f64, bf16, i8, u8; the others f32, f64, bf16 (bf16 computes in f32 per plane).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/average_pool_grad_rows.h"
#include "trainrt/kernels/cpu/average_pool_rows.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/max_pool_rows.h"
#include "trainrt/kernels/cpu/pool_windows.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/pool_geometry.h"

namespace trainrt {
namespace {

// MaxPoolWithArgmax's one-byte Argmax: a tap index below kMaxArgmaxTaps, or kNoArgmax.
constexpr int64_t kMaxArgmaxTaps = 255;
constexpr uint8_t kNoArgmax = 255;

struct PoolSpec {
  std::string node;
  PoolAttributes attrs;
  bool count_include_pad = false;
  bool column_major = false;
};

PoolSpec spec_of(const Node& node) {
  return PoolSpec{.node = node.describe(),
                  .attrs = PoolAttributes::of(node),
                  .count_include_pad = node.attr_int("count_include_pad", 0) != 0,
                  .column_major = node.attr_int("storage_order", 0) != 0};
}

// The windows of X of dims x_dims, and Y's dims. A global pool over more than 3 spatial dims is one
// over their flattened extent; other pools support 1 to 3.
struct Pooling {
  Windows windows;
  std::vector<int64_t> y_dims;
};
Pooling pooling_of(const PoolSpec& s, const std::vector<int64_t>& x_dims) {
  PoolGeometry g = s.attrs.geometry(s.node, x_dims);
  std::vector<int64_t> y_dims(x_dims.begin(), x_dims.begin() + 2);
  y_dims.insert(y_dims.end(), g.out.begin(), g.out.end());
  if (g.in.size() > 3) {
    if (!s.attrs.global)
      throw UnsupportedOp(fmt(s.node, ": pooling over ", g.in.size(), " spatial dims (input 0 of shape ",
                              to_string(x_dims), ") is not supported; 1 to 3 are"));
    const int64_t n = g.in_plane();
    g.in = g.kernel = {n};
    g.out = g.stride = g.dilation = {1};
    g.pad_begin = g.pad_end = {0};
  }
  return {Windows(g), std::move(y_dims)};
}

// Converts a row-major offset within the plane to the column-major one.
// The pooling of a node's last run and the X dims it was made for. A node's kernel runs one call
// at a time (a session runs its steps in order), so it needs no lock.
class KeptPooling {
 public:
  // The pooling for X dims x_dims: the kept one when they are the last run's, else made again.
  const Pooling& of(const PoolSpec& s, std::span<const int64_t> x_dims) {
    if (!pooling_ || !std::equal(x_dims.begin(), x_dims.end(), x_dims_.begin(), x_dims_.end())) {
      pooling_.reset();
      x_dims_.assign(x_dims.begin(), x_dims.end());
      pooling_.emplace(pooling_of(s, x_dims_));
    }
    return *pooling_;
  }

 private:
  std::vector<int64_t> x_dims_;
  std::optional<Pooling> pooling_;
};

int64_t column_major_offset(const Windows& w, int64_t p) {
  const int64_t c = p % w.in[2], b = p / w.in[2] % w.in[1], a = p / (w.in[2] * w.in[1]);
  return c * w.in[1] * w.in[0] + b * w.in[0] + a;
}

// ---- Planes ----
// Each kernel runs plane by plane in its compute type: f32 and f64 (and MaxPool's i8, u8) in
// their own, bf16 in f32 on a widened copy of the plane (exact: pooling only compares, adds and
// divides; outputs are rounded once).

template <typename T>
using pool_t = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;

// The n elements at src as pool_t<T>: src itself, or for bf16 a widened copy in scratch `slot`.
template <typename T>
const pool_t<T>* plane_in(const T* src, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    float* buf = scratch<float>(slot, n);
    convert_to_f32(src, buf, n);
    return buf;
  } else {
    return src;
  }
}
// Where to compute n elements of dst; plane_commit then moves them into place.
template <typename T>
pool_t<T>* plane_out(T* dst, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, BFloat16>) return scratch<float>(slot, n);
  else return dst;
}
template <typename T>
void plane_commit(const pool_t<T>* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) convert_from_f32(src, dst, n);
}

// The window maxima of plane x into y (out_plane) and, with kArgmax, each window's first largest
// tap to each(o, offset in the plane; -1 for a window wholly in padding). f32 planes of 1 or 2
// spatial dims take the vectorized rows (max_pool_rows.h); the rest walk window by window.
template <bool kArgmax, typename C, typename F>
void max_plane(const Windows& w, const C* x, C* y, F&& each) {
  if constexpr (std::is_same_v<C, float>) {
    if (max_pool_rows_apply(w)) {
      int32_t* at = kArgmax ? scratch<int32_t>(0, w.out_plane()) : nullptr;
      max_pool_plane_rows(w, x, y, at);
      if constexpr (kArgmax)
        for (int64_t o = 0; o < w.out_plane(); ++o) each(o, at[o]);
      return;
    }
  }
  w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
    const int64_t best = argmax(w, x, r, start);
    y[o] = best < 0 ? std::numeric_limits<C>::lowest() : x[best];
    if constexpr (kArgmax) each(o, best);
  });
}

// ---- Kernels ----

template <typename T>
void max_pool(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& x = ctx.in(0);
  const Windows& w = kept.of(s, x.dims()).windows;
  const T* xd = x.data<T>();
  T* yd = ctx.out(0).data<T>();
  int64_t* indices = ctx.has_out(1) ? ctx.out(1).data<int64_t>() : nullptr;
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* plane = plane_in(xd + p * in_plane, in_plane, 0);
      C* y = plane_out(yd + p * out_plane, out_plane, 1);
      if constexpr (std::is_floating_point_v<C>) {
        if (s.attrs.global && !indices) {
          y[0] = row_max(plane, in_plane);
          plane_commit(y, yd + p * out_plane, out_plane);
          continue;
        }
      }
      if (indices) {
        max_plane<true>(w, plane, y, [&](int64_t o, int64_t best) {
          indices[p * out_plane + o] =
              best < 0 ? -1 : p * in_plane + (s.column_major ? column_major_offset(w, best) : best);
        });
      } else {
        max_plane<false>(w, plane, y, [](int64_t, int64_t) {});
      }
      plane_commit(y, yd + p * out_plane, out_plane);
    }
  });
}

// The offset of each kernel tap (row major over kernel_shape) from its window's origin
// start[0] * in[1] * in[2] + start[1] * in[2] + start[2]; a tap's plane offset is origin + this.
std::array<int64_t, kMaxArgmaxTaps> tap_offsets(const Windows& w) {
  std::array<int64_t, kMaxArgmaxTaps> at{};
  int64_t t = 0;
  for (int64_t i = 0; i < w.kernel[0]; ++i)
    for (int64_t j = 0; j < w.kernel[1]; ++j)
      for (int64_t k = 0; k < w.kernel[2]; ++k)
        at[static_cast<size_t>(t++)] = (i * w.dilation[0] * w.in[1] + j * w.dilation[1]) * w.in[2] + k * w.dilation[2];
  return at;
}

int64_t window_origin(const Windows& w, const std::array<int64_t, 3>& start) {
  return (start[0] * w.in[1] + start[1]) * w.in[2] + start[2];
}

// The index among the window's kernel taps of the in-bounds tap at plane offset p (in-bounds taps
// have distinct offsets; an out-of-bounds tap can share one when a window is wider than a row).
int64_t tap_index(const Windows& w, int64_t p, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
  for (int64_t i = r[0].lo; i < r[0].hi; ++i)
    for (int64_t j = r[1].lo; j < r[1].hi; ++j) {
      const int64_t row = ((start[0] + i * w.dilation[0]) * w.in[1] + start[1] + j * w.dilation[1]) * w.in[2];
      const int64_t d = p - row - start[2];
      if (d < 0 || d % w.dilation[2] != 0) continue;
      const int64_t k = d / w.dilation[2];
      if (k >= r[2].lo && k < r[2].hi) return (i * w.kernel[1] + j) * w.kernel[2] + k;
    }
  return -1;
}

int64_t kernel_taps(const Windows& w) { return w.kernel[0] * w.kernel[1] * w.kernel[2]; }

// Each kernel tap's index by its offset from the window origin (tap_offsets), kNoArgmax where no
// tap lands: an argmax found at plane offset p is then table[p - origin], one load instead of
// tap_index's walk (which cost MaxPoolWithArgmax 18x MaxPool's time). Empty where two taps share
// an offset (the window is wider than a row or plane: an out-of-bounds tap wraps onto an in-bounds
// one) or the table would be large; tap_index serves those.
std::vector<uint8_t> tap_by_offset(const Windows& w) {
  const std::array<int64_t, kMaxArgmaxTaps> at = tap_offsets(w);
  const int64_t taps = kernel_taps(w);
  const int64_t size = at[static_cast<size_t>(taps - 1)] + 1;  // the last tap's offset is the largest
  for (int d = 1; d < 3; ++d)
    if ((w.kernel[d] - 1) * w.dilation[d] >= w.in[d]) return {};
  if (size > (int64_t{1} << 20)) return {};
  std::vector<uint8_t> table(static_cast<size_t>(size), kNoArgmax);
  for (int64_t t = 0; t < taps; ++t) table[static_cast<size_t>(at[static_cast<size_t>(t)])] = static_cast<uint8_t>(t);
  return table;
}

// at[o] = the tap index of each window's argmax best[o] (a plane offset; -1: kNoArgmax), read from
// tap_by_offset's table at its offset from the window origin.
void tap_indices(const Windows& w, const int64_t* best, const uint8_t* by_offset, uint8_t* at) {
  int64_t o = 0;
  for (int64_t a = 0; a < w.out[0]; ++a)
    for (int64_t b = 0; b < w.out[1]; ++b) {
      const int64_t row = (w.start_of[0][static_cast<size_t>(a)] * w.in[1] + w.start_of[1][static_cast<size_t>(b)]) * w.in[2];
      const int64_t* start = w.start_of[2].data();
      for (int64_t c = 0; c < w.out[2]; ++c, ++o)
        at[o] = best[o] < 0 ? kNoArgmax : by_offset[best[o] - row - start[c]];
    }
}

template <typename T>
void max_pool_with_argmax(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& x = ctx.in(0);
  const Windows& w = kept.of(s, x.dims()).windows;
  if (kernel_taps(w) > kMaxArgmaxTaps)
    throw UnsupportedOp(fmt(s.node, ": a window of ", kernel_taps(w), " taps does not fit output 1 (Argmax, u8); at most ",
                            kMaxArgmaxTaps));
  const T* xd = x.data<T>();
  T* yd = ctx.out(0).data<T>();
  uint8_t* argmax = ctx.out(1).data<uint8_t>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  const std::vector<uint8_t> by_offset = tap_by_offset(w);
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* plane = plane_in(xd + p * in_plane, in_plane, 0);
      C* y = plane_out(yd + p * out_plane, out_plane, 1);
      int64_t* best = scratch<int64_t>(2, out_plane);
      max_plane<true>(w, plane, y, [&](int64_t o, int64_t b) { best[o] = b; });
      uint8_t* at = argmax + p * out_plane;
      if (!by_offset.empty()) {
        tap_indices(w, best, by_offset.data(), at);
      } else {
        w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
          at[o] = best[o] < 0 ? kNoArgmax : static_cast<uint8_t>(tap_index(w, best[o], r, start));
        });
      }
      plane_commit(y, yd + p * out_plane, out_plane);
    }
  });
}

template <typename T>
void average_pool(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& x = ctx.in(0);
  const Windows& w = kept.of(s, x.dims()).windows;
  const T* xd = x.data<T>();
  T* yd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* plane = plane_in(xd + p * in_plane, in_plane, 0);
      C* y = plane_out(yd + p * out_plane, out_plane, 1);
      bool done = false;
      if (s.attrs.global) {
        y[0] = row_sum(plane, in_plane) / static_cast<C>(in_plane);
        done = true;
      } else if constexpr (std::is_same_v<C, float>) {
        if (average_pool_rows_apply(w)) {
          average_pool_plane_rows(w, plane, y, s.count_include_pad);
          done = true;
        }
      }
      if (!done) {
        w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
          C sum = 0;
          w.for_each_tap(r, start, [&](int64_t t) { sum += plane[t]; });
          const int64_t n = w.count(r, start, s.count_include_pad);
          y[o] = n == 0 ? C(0) : sum / static_cast<C>(n);
        });
      }
      plane_commit(y, yd + p * out_plane, out_plane);
    }
  });
}

// The windows of X, checking that dY has the pooled dims of X's.
const Windows& grad_windows(const PoolSpec& s, KeptPooling& kept, const Tensor& dy, std::span<const int64_t> x_dims) {
  const Pooling& p = kept.of(s, x_dims);
  if (dy.dims() != p.y_dims)
    throw ShapeError(fmt(s.node, ": input 0 (dY) has shape ", to_string(dy.dims()), ", expected ",
                         to_string(p.y_dims), " for X of shape ",
                         to_string(std::vector<int64_t>(x_dims.begin(), x_dims.end()))));
  return p.windows;
}

template <typename T>
void max_pool_grad(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Windows& w = grad_windows(s, kept, dy, x.dims());
  const T* xd = x.data<T>();
  const T* dyd = dy.data<T>();
  T* dxd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* plane = plane_in(xd + p * in_plane, in_plane, 0);
      const C* dyp = plane_in(dyd + p * out_plane, out_plane, 1);
      C* dx = plane_out(dxd + p * in_plane, in_plane, 2);
      C* y = scratch<C>(3, out_plane);  // the maxima, unused
      std::fill(dx, dx + in_plane, C(0));
      max_plane<true>(w, plane, y, [&](int64_t o, int64_t best) {
        if (best >= 0) dx[best] += dyp[o];
      });
      plane_commit(dx, dxd + p * in_plane, in_plane);
    }
  });
}

template <typename T>
void max_pool_argmax_grad(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& dy = ctx.in(0);
  const Tensor& argmax = ctx.in(1);
  const Tensor& x_shape = ctx.in(2);  // i64 (the schema's)
  TRAINRT_CHECK(x_shape.rank() == 1, s.node, ": input 2 (X_shape) is ", describe(x_shape), ", expected a 1-D tensor");
  TRAINRT_CHECK(argmax.dims() == dy.dims(), s.node, ": input 1 (Argmax) has shape ", to_string(argmax.dims()),
                ", expected dY's ", to_string(dy.dims()));
  const Windows& w = grad_windows(s, kept, dy, std::span(x_shape.data<int64_t>(), static_cast<size_t>(x_shape.numel())));
  const int64_t taps = kernel_taps(w);
  const std::array<int64_t, kMaxArgmaxTaps> offsets = tap_offsets(w);
  const T* dyd = dy.data<T>();
  T* dxd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* dyp = plane_in(dyd + p * out_plane, out_plane, 1);
      const uint8_t* at = argmax.data<uint8_t>() + p * out_plane;
      C* dx = plane_out(dxd + p * in_plane, in_plane, 2);
      std::fill(dx, dx + in_plane, C(0));
      w.for_each_window([&](int64_t o, const std::array<TapRange, 3>&, const std::array<int64_t, 3>& start) {
        if (at[o] == kNoArgmax) return;
        TRAINRT_CHECK(at[o] < taps, s.node, ": input 1 (Argmax) names tap ", int{at[o]}, " of a window of ", taps);
        dx[window_origin(w, start) + offsets[at[o]]] += dyp[o];
      });
      plane_commit(dx, dxd + p * in_plane, in_plane);
    }
  });
}

template <typename T>
void average_pool_grad(const PoolSpec& s, KeptPooling& kept, KernelContext& ctx) {
  using C = pool_t<T>;
  const Tensor& dy = ctx.in(0);
  const Tensor& x_shape = ctx.in(1);  // i64 (the schema's)
  TRAINRT_CHECK(x_shape.dtype() == DType::kI64 && x_shape.rank() == 1, s.node, ": input 1 (X_shape) is ",
                describe(x_shape), ", expected a 1-D i64 tensor");
  const Windows& w = grad_windows(s, kept, dy, std::span(x_shape.data<int64_t>(), static_cast<size_t>(x_shape.numel())));
  const T* dyd = dy.data<T>();
  T* dxd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const C* dyp = plane_in(dyd + p * out_plane, out_plane, 1);
      C* dx = plane_out(dxd + p * in_plane, in_plane, 2);
      bool done = false;
      if (s.attrs.global) {
        std::fill(dx, dx + in_plane, dyp[0] / static_cast<C>(in_plane));
        done = true;
      } else if constexpr (std::is_same_v<C, float>) {
        if (average_pool_grad_rows_apply(w)) {
          average_pool_grad_plane_rows(w, dyp, dx, s.count_include_pad);
          done = true;
        }
      }
      if (!done) {
        std::fill(dx, dx + in_plane, C(0));
        w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
          const int64_t n = w.count(r, start, s.count_include_pad);
          if (n == 0) return;
          const C g = dyp[o] / static_cast<C>(n);
          w.for_each_tap(r, start, [&](int64_t t) { dx[t] += g; });
        });
      }
      plane_commit(dx, dxd + p * in_plane, in_plane);
    }
  });
}

template <typename T>
KernelFn make_max_pool(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable { max_pool<T>(s, kept, ctx); };
}
template <typename T>
KernelFn make_average_pool(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable { average_pool<T>(s, kept, ctx); };
}
template <typename T>
KernelFn make_max_pool_grad(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable { max_pool_grad<T>(s, kept, ctx); };
}
template <typename T>
KernelFn make_max_pool_with_argmax(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable {
    max_pool_with_argmax<T>(s, kept, ctx);
  };
}
template <typename T>
KernelFn make_max_pool_argmax_grad(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable {
    max_pool_argmax_grad<T>(s, kept, ctx);
  };
}
template <typename T>
KernelFn make_average_pool_grad(const Node& node) {
  return [s = spec_of(node), kept = KeptPooling()](KernelContext& ctx) mutable {
    average_pool_grad<T>(s, kept, ctx);
  };
}

}  // namespace

void register_pool_kernels(KernelTable& t) {
  for (const char* op : {"MaxPool", "GlobalMaxPool"}) {
    t.add("", op, DType::kF32, make_max_pool<float>);
    t.add("", op, DType::kF64, make_max_pool<double>);
    t.add("", op, DType::kBF16, make_max_pool<BFloat16>);
    t.add("", op, DType::kI8, make_max_pool<int8_t>);
    t.add("", op, DType::kU8, make_max_pool<uint8_t>);
  }
  for (const char* op : {"AveragePool", "GlobalAveragePool"}) {
    t.add("", op, DType::kF32, make_average_pool<float>);
    t.add("", op, DType::kF64, make_average_pool<double>);
    t.add("", op, DType::kBF16, make_average_pool<BFloat16>);
  }
  t.add(kTrainrtDomain, "MaxPoolGrad", DType::kF32, make_max_pool_grad<float>);
  t.add(kTrainrtDomain, "MaxPoolGrad", DType::kF64, make_max_pool_grad<double>);
  t.add(kTrainrtDomain, "MaxPoolGrad", DType::kBF16, make_max_pool_grad<BFloat16>);
  t.add(kTrainrtDomain, "MaxPoolWithArgmax", DType::kF32, make_max_pool_with_argmax<float>);
  t.add(kTrainrtDomain, "MaxPoolWithArgmax", DType::kF64, make_max_pool_with_argmax<double>);
  t.add(kTrainrtDomain, "MaxPoolWithArgmax", DType::kBF16, make_max_pool_with_argmax<BFloat16>);
  t.add(kTrainrtDomain, "MaxPoolArgmaxGrad", DType::kF32, make_max_pool_argmax_grad<float>);
  t.add(kTrainrtDomain, "MaxPoolArgmaxGrad", DType::kF64, make_max_pool_argmax_grad<double>);
  t.add(kTrainrtDomain, "MaxPoolArgmaxGrad", DType::kBF16, make_max_pool_argmax_grad<BFloat16>);
  t.add(kTrainrtDomain, "AveragePoolGrad", DType::kF32, make_average_pool_grad<float>);
  t.add(kTrainrtDomain, "AveragePoolGrad", DType::kF64, make_average_pool_grad<double>);
  t.add(kTrainrtDomain, "AveragePoolGrad", DType::kBF16, make_average_pool_grad<BFloat16>);
}

}  // namespace trainrt
