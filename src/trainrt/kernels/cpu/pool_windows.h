// The pooling windows of one call, as the CPU pooling kernels walk them: a PoolGeometry
// (ops/pool_geometry.h) as exactly three spatial dims, with each window's in-bounds taps per dim
// computed once per call, and the general (any rank, kernel, stride, dilation, padding) window
// walk with its argmax rule. pool_kernels.cc runs every pool through it; max_pool_rows.h and
// average_pool_rows.h are the vectorized paths of 1-D and 2-D f32 max and average pooling and must
// agree with it bit for bit.
//
//   const Windows w(attrs.geometry(node, x_dims));      // 1-D and 2-D: leading dims of extent 1
//   w.for_each_window([&](int64_t o, const auto& r, const auto& start) {
//     y[o] = plane[argmax(w, plane, r, start)];          // argmax -1: window wholly in padding
//   });
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "trainrt/ops/pool_geometry.h"

namespace trainrt {

// [lo, hi): the taps j of a window starting at `start` with 0 <= start + j * dilation < extent.
struct TapRange {
  int64_t lo = 0, hi = 0;
};
inline TapRange taps(int64_t start, int64_t kernel, int64_t dilation, int64_t extent) {
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

  // g has 1 to 3 spatial dims.
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

  // The window's divisor for AveragePool: the product of count_along() over the dims, in order.
  int64_t count(const std::array<TapRange, 3>& r, const std::array<int64_t, 3>& start, bool include_pad) const {
    int64_t n = 1;
    for (int i = 0; i < 3; ++i) n *= count_along(i, r[i], start[i], include_pad);
    return n;
  }
  // Whether the vectorized row paths suit these windows: they walk every kernel tap of the two
  // inner dims and lay the plane out in `stride` phases, so a kernel of many taps over a much
  // smaller padded input (EfficientNet's AvgPool2d(1280, ceil_mode=True) over a 2 x 2 map:
  // 1280 x 1280 taps, 4 of them in bounds) cost 28 s a call, where the general walk visits the
  // in-bounds taps alone. Small kernels (up to 64 taps) always take the row paths.
  bool kernel_fits_padded_input() const {
    const int64_t kernel_taps = kernel[1] * kernel[2];
    const int64_t padded = (pad_begin[1] + in[1] + pad_end[1]) * (pad_begin[2] + in[2] + pad_end[2]);
    return kernel_taps <= 64 || kernel_taps <= 4 * padded;
  }

  // The taps a window counts along dim d: its in-bounds taps r, or with include_pad those in the
  // padded extent.
  int64_t count_along(int d, TapRange r, int64_t start, bool include_pad) const {
    const TapRange t =
        include_pad ? taps(start + pad_begin[d], kernel[d], dilation[d], in[d] + pad_begin[d] + pad_end[d]) : r;
    return t.hi - t.lo;
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

// Whether tap value v replaces the running maximum `best` of a window: larger, or a NaN over a
// non-NaN (a NaN counts as larger than anything, as in PyTorch max_pool2d; of several NaNs the
// first wins, where torch's CPU kernel takes the last). Ties keep the earlier tap.
template <typename T>
inline bool beats(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) return v > best || (v != v && best == best);
  else return v > best;
}

// The first largest tap of a window (beats() in row-major tap order), as an offset in the plane;
// -1 when the window lies wholly in padding.
template <typename T>
int64_t argmax(const Windows& w, const T* plane, const std::array<TapRange, 3>& r,
               const std::array<int64_t, 3>& start) {
  int64_t best = -1;
  T best_value = std::numeric_limits<T>::lowest();
  w.for_each_tap(r, start, [&](int64_t p) {
    const T v = plane[p];
    if (best < 0 || beats(v, best_value)) {
      best = p;
      best_value = v;
    }
  });
  return best;
}

}  // namespace trainrt
