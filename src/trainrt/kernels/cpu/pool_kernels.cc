// CPU kernels of MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool (ONNX opset 22) and of
// their gradient ops MaxPoolGrad and AveragePoolGrad (TrainRT domain).
//
// The windows come from ops/pool_geometry.h; 1-D and 2-D pools are run as 3-D ones with leading
// spatial dims of extent 1. Work is split over the N * C planes; each plane is walked window by
// window, each window over its in-bounds taps only (their range per dim computed up front, no
// per-tap bounds test). Per window:
//   MaxPool      y = the largest tap; its index is the first largest in row-major order, a NaN
//                counting as larger than anything (PyTorch max_pool2d, so MaxPoolGrad routes
//                dY where torch does). Indices: (n * C + c) * plane + the tap's offset within
//                the plane, row major (storage_order 0) or column major (1) as ONNX defines it.
//   AveragePool  y = sum of the in-bounds taps / count: count_include_pad=0 counts those taps,
//                1 also the taps on explicit or automatic padding (not those past it, which
//                ceil_mode can add: PyTorch avg_pool2d's divisor)
//   MaxPoolGrad(dY, X)          dX[argmax of window] += dY[window]  (argmax found again in X)
//   AveragePoolGrad(dY, shape)  dX[tap] += dY[window] / count for every in-bounds tap
// The global pools reduce each contiguous plane with the vectorized row reductions.
// MaxPool: f32, f64, i8, u8; the others f32, f64.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/pool_geometry.h"

namespace trainrt {
namespace {

// [lo, hi): the taps j of a window starting at `start` with 0 <= start + j * dilation < extent.
struct TapRange {
  int64_t lo = 0, hi = 0;
};
TapRange taps(int64_t start, int64_t kernel, int64_t dilation, int64_t extent) {
  TapRange r;
  r.lo = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  r.hi = extent <= start ? 0 : std::min(kernel, (extent - start + dilation - 1) / dilation);
  r.hi = std::max(r.hi, r.lo);
  return r;
}

// A PoolGeometry as exactly three spatial dims (leading ones of extent 1).
struct Windows {
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1},
      pad_begin{0, 0, 0}, pad_end{0, 0, 0};
  // Per dim and output index: the window's first input position and its in-bounds taps, computed
  // once per call (taps() divides; per window and plane it cost more than the pooling itself).
  std::array<std::vector<int64_t>, 3> start_of;
  std::array<std::vector<TapRange>, 3> taps_of;
  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }

  // g has 1 to 3 spatial dims (windows_of makes sure).
  explicit Windows(const PoolGeometry& g) : planes(g.planes) {
    const size_t off = 3 - g.in.size();
    for (size_t i = 0; i < g.in.size(); ++i) {
      in[off + i] = g.in[i], out[off + i] = g.out[i], kernel[off + i] = g.kernel[i];
      stride[off + i] = g.stride[i], dilation[off + i] = g.dilation[i];
      pad_begin[off + i] = g.pad_begin[i], pad_end[off + i] = g.pad_end[i];
    }
    for (int d = 0; d < 3; ++d)
      for (int64_t o = 0; o < out[d]; ++o) {
        start_of[d].push_back(o * stride[d] - pad_begin[d]);
        taps_of[d].push_back(taps(start_of[d].back(), kernel[d], dilation[d], in[d]));
      }
  }

  // Calls f(out_offset, range per dim, start per dim) for every output position of a plane.
  template <typename F>
  void for_each_window(F&& f) const {
    int64_t o = 0;
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c, ++o)
          f(o, std::array<TapRange, 3>{taps_of[0][a], taps_of[1][b], taps_of[2][c]},
            std::array<int64_t, 3>{start_of[0][a], start_of[1][b], start_of[2][c]});
  }

  // The window's divisor for AveragePool.
  int64_t count(const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start, bool include_pad) const {
    int64_t n = 1;
    for (int i = 0; i < 3; ++i) {
      const TapRange t = include_pad ? taps(start[i] + pad_begin[i], kernel[i], dilation[i],
                                            in[i] + pad_begin[i] + pad_end[i])
                                     : r[i];
      n *= t.hi - t.lo;
    }
    return n;
  }

  // Calls f(offset within the plane) for every in-bounds tap, in row-major order.
  template <typename F>
  void for_each_tap(const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start, F&& f) const {
    for (int64_t i = r[0].lo; i < r[0].hi; ++i) {
      const int64_t p0 = (start[0] + i * dilation[0]) * in[1];
      for (int64_t j = r[1].lo; j < r[1].hi; ++j) {
        const int64_t p1 = (p0 + start[1] + j * dilation[1]) * in[2] + start[2];
        for (int64_t k = r[2].lo; k < r[2].hi; ++k) f(p1 + k * dilation[2]);
      }
    }
  }
};

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

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// The first largest tap of a window (NaN wins), as an offset in the plane; -1 when the window
// lies wholly in padding.
template <typename T>
int64_t argmax(const Windows& w, const T* plane, const std::array<TapRange, 3>& r,
               const std::array<int64_t, 3>& start) {
  int64_t best = -1;
  T best_value = std::numeric_limits<T>::lowest();
  w.for_each_tap(r, start, [&](int64_t p) {
    const T v = plane[p];
    if (best < 0 || v > best_value || (is_nan(v) && !is_nan(best_value))) {
      best = p;
      best_value = v;
    }
  });
  return best;
}

// Converts a row-major offset within the plane to the column-major one.
int64_t column_major_offset(const Windows& w, int64_t p) {
  const int64_t c = p % w.in[2], b = p / w.in[2] % w.in[1], a = p / (w.in[2] * w.in[1]);
  return c * w.in[1] * w.in[0] + b * w.in[0] + a;
}

template <typename T>
void max_pool(const PoolSpec& s, KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Windows w = pooling_of(s, x.dims()).windows;
  const T* xd = x.data<T>();
  T* yd = ctx.out(0).data<T>();
  int64_t* indices = ctx.has_out(1) ? ctx.out(1).data<int64_t>() : nullptr;
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  if (s.attrs.global && !indices && std::is_floating_point_v<T>) {
    ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        if constexpr (std::is_floating_point_v<T>) yd[p] = row_max(xd + p * in_plane, in_plane);
      }
    });
    return;
  }
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = xd + p * in_plane;
      w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
        const int64_t best = argmax(w, plane, r, start);
        yd[p * out_plane + o] = best < 0 ? std::numeric_limits<T>::lowest() : plane[best];
        if (indices)
          indices[p * out_plane + o] =
              best < 0 ? -1 : p * in_plane + (s.column_major ? column_major_offset(w, best) : best);
      });
    }
  });
}

template <typename T>
void average_pool(const PoolSpec& s, KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Windows w = pooling_of(s, x.dims()).windows;
  const T* xd = x.data<T>();
  T* yd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = xd + p * in_plane;
      if (s.attrs.global) {
        yd[p] = row_sum(plane, in_plane) / static_cast<T>(in_plane);
        continue;
      }
      w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
        T sum = 0;
        w.for_each_tap(r, start, [&](int64_t t) { sum += plane[t]; });
        const int64_t n = w.count(r, start, s.count_include_pad);
        yd[p * out_plane + o] = n == 0 ? T(0) : sum / static_cast<T>(n);
      });
    }
  });
}

// The windows of X, checking that dY has the pooled dims of X's.
Windows grad_windows(const PoolSpec& s, const Tensor& dy, const std::vector<int64_t>& x_dims) {
  Pooling p = pooling_of(s, x_dims);
  if (dy.dims() != p.y_dims)
    throw ShapeError(fmt(s.node, ": input 0 (dY) has shape ", to_string(dy.dims()), ", expected ",
                         to_string(p.y_dims), " for X of shape ", to_string(x_dims)));
  return p.windows;
}

template <typename T>
void max_pool_grad(const PoolSpec& s, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Windows w = grad_windows(s, dy, x.dims());
  const T* xd = x.data<T>();
  const T* dyd = dy.data<T>();
  T* dxd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = xd + p * in_plane;
      T* dplane = dxd + p * in_plane;
      std::fill(dplane, dplane + in_plane, T(0));
      w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
        const int64_t best = argmax(w, plane, r, start);
        if (best >= 0) dplane[best] += dyd[p * out_plane + o];
      });
    }
  });
}

template <typename T>
void average_pool_grad(const PoolSpec& s, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const std::vector<int64_t> x_dims = ctx.in(1).to_i64_vector();
  const Windows w = grad_windows(s, dy, x_dims);
  const T* dyd = dy.data<T>();
  T* dxd = ctx.out(0).data<T>();
  const int64_t in_plane = w.in_plane(), out_plane = w.out_plane();
  ctx.threads().parallel_for(w.planes, rows_per_task(in_plane), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* dplane = dxd + p * in_plane;
      if (s.attrs.global) {
        std::fill(dplane, dplane + in_plane, dyd[p] / static_cast<T>(in_plane));
        continue;
      }
      std::fill(dplane, dplane + in_plane, T(0));
      w.for_each_window([&](int64_t o, const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start) {
        const int64_t n = w.count(r, start, s.count_include_pad);
        if (n == 0) return;
        const T g = dyd[p * out_plane + o] / static_cast<T>(n);
        w.for_each_tap(r, start, [&](int64_t t) { dplane[t] += g; });
      });
    }
  });
}

template <typename T>
KernelFn make_max_pool(const Node& node) {
  return [s = spec_of(node)](KernelContext& ctx) { max_pool<T>(s, ctx); };
}
template <typename T>
KernelFn make_average_pool(const Node& node) {
  return [s = spec_of(node)](KernelContext& ctx) { average_pool<T>(s, ctx); };
}
template <typename T>
KernelFn make_max_pool_grad(const Node& node) {
  return [s = spec_of(node)](KernelContext& ctx) { max_pool_grad<T>(s, ctx); };
}
template <typename T>
KernelFn make_average_pool_grad(const Node& node) {
  return [s = spec_of(node)](KernelContext& ctx) { average_pool_grad<T>(s, ctx); };
}

}  // namespace

void register_pool_kernels(KernelTable& t) {
  for (const char* op : {"MaxPool", "GlobalMaxPool"}) {
    t.add("", op, DType::kF32, make_max_pool<float>);
    t.add("", op, DType::kF64, make_max_pool<double>);
    t.add("", op, DType::kI8, make_max_pool<int8_t>);
    t.add("", op, DType::kU8, make_max_pool<uint8_t>);
  }
  for (const char* op : {"AveragePool", "GlobalAveragePool"}) {
    t.add("", op, DType::kF32, make_average_pool<float>);
    t.add("", op, DType::kF64, make_average_pool<double>);
  }
  t.add(kTrainrtDomain, "MaxPoolGrad", DType::kF32, make_max_pool_grad<float>);
  t.add(kTrainrtDomain, "MaxPoolGrad", DType::kF64, make_max_pool_grad<double>);
  t.add(kTrainrtDomain, "AveragePoolGrad", DType::kF32, make_average_pool_grad<float>);
  t.add(kTrainrtDomain, "AveragePoolGrad", DType::kF64, make_average_pool_grad<double>);
}

}  // namespace trainrt
