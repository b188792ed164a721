#include "trainrt/kernels/cpu/max_pool_rows.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "trainrt/core/simd.h"

namespace trainrt {
namespace {

// The plane is first copied into a "phase" layout so that every pass below is a contiguous,
// stride-1 loop over the output columns: input row y, padded by pad_begin on the left and -inf to
// the right, is split into its sw phases (phase r holds the padded columns r, r + sw, r + 2 sw,
// ...), each wq long. Tap kx of output column ox reads padded column ox * sw + kx * dw, which is
// element ox + kx * dw / sw of phase kx * dw % sw. (Strided loads straight from the plane are
// peeled by GCC into scalar code on rows shorter than 17 windows, the common case.) Planes are
// small (a CNN's 32x32), so the work per call is kept to one call per plane and per output row.

// Phase r of input row y starts at data + (r * height + y) * wq.
struct Phases {
  int64_t wq = 0, height = 0;
  const float* data = nullptr;
  const float* row(int64_t y, int64_t r) const { return data + (r * height + y) * wq; }
};

// even[j] = src[2 j], odd[j] = src[2 j + 1] for j < n (a full group of two loads: no peeling).
[[gnu::always_inline]] inline void deinterleave(const float* src, float* __restrict even, float* __restrict odd,
                                                int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    even[j] = src[2 * j];
    odd[j] = src[2 * j + 1];
  }
}

// Unpadded rows whose width is a multiple of sw: the plane split as one long row.
TRAINRT_SIMD_CLONES void split_whole(const float* x, int64_t n, int64_t sw, float* __restrict dst) {
  if (sw == 2) {
    deinterleave(x, dst, dst + n / 2, n / 2);
  } else {
    for (int64_t r = 0; r < sw; ++r)
      for (int64_t j = 0; j < n / sw; ++j) dst[r * (n / sw) + j] = x[j * sw + r];
  }
}

// Row by row through a padded staging row (before + w + after = wq * sw, padding -inf: any value
// would do, border columns are recomputed from the plane).
TRAINRT_SIMD_CLONES void split_padded(const float* x, int64_t height, int64_t w, int64_t before, int64_t wq,
                                      int64_t sw, float* __restrict staging, float* __restrict dst) {
  const int64_t padded = wq * sw;
  for (int64_t i = 0; i < padded; ++i) staging[i] = -std::numeric_limits<float>::infinity();
  for (int64_t y = 0; y < height; ++y) {
    const float* src = x + y * w;
    for (int64_t i = 0; i < w; ++i) staging[before + i] = src[i];
    float* out = dst + y * wq;  // phase r at out + r * height * wq
    if (sw == 1) {
      for (int64_t j = 0; j < wq; ++j) out[j] = staging[j];
    } else if (sw == 2) {
      deinterleave(staging, out, out + height * wq, wq);
    } else {
      for (int64_t r = 0; r < sw; ++r)
        for (int64_t j = 0; j < wq; ++j) out[r * height * wq + j] = staging[j * sw + r];
    }
  }
}

Phases split_plane(const Windows& w, const float* x) {
  const int64_t sw = w.stride[2], before = w.pad_begin[2], height = w.in[1], width = w.in[2];
  // The padded row must reach the last tap of the last window.
  const int64_t reach = (w.out[2] - 1) * sw + (w.kernel[2] - 1) * w.dilation[2] + 1;
  const int64_t wq = (std::max(reach, before + width) + sw - 1) / sw;
  if (before == 0 && wq * sw == width && sw == 1) return {wq, height, x};
  static thread_local std::vector<float> buffer;  // keeps its largest size: no steady-state allocation
  buffer.resize(static_cast<size_t>(wq * sw * (height + 1)));
  float* out = buffer.data();
  if (before == 0 && wq * sw == width) split_whole(x, height * width, sw, out);
  else split_padded(x, height, width, before, wq, sw, out + wq * sw * height, out);
  return {wq, height, out};
}

// One output row: for n = out_w windows, best = the first largest tap (beats()), at = its plane
// offset (when not null). All taps of the in-bounds kernel rows, from the phases; the caller then
// redoes the border columns.
TRAINRT_SIMD_CLONES void max_row(const Windows& w, const Phases& ph, int64_t oy, float* __restrict best,
                                 int32_t* __restrict at) {
  const int64_t n = w.out[2], sw = w.stride[2], dw = w.dilation[2];
  const TapRange rows = w.taps_of[1][oy];
  const auto s = static_cast<int32_t>(sw);
  for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
    const int64_t in_y = w.start_of[1][oy] + ky * w.dilation[1];
    for (int64_t kx = 0; kx < w.kernel[2]; ++kx) {
      const float* src = ph.row(in_y, kx * dw % sw) + kx * dw / sw;
      const auto base = static_cast<int32_t>(in_y * w.in[2] + kx * dw - w.pad_begin[2]);
      if (ky == rows.lo && kx == 0) {
        for (int64_t i = 0; i < n; ++i) best[i] = src[i];
        if (at)
          for (int64_t i = 0; i < n; ++i) at[i] = base + static_cast<int32_t>(i) * s;
      } else if (at) {
        for (int64_t i = 0; i < n; ++i) {
          const float v = src[i], b = best[i];
          const bool take = beats(v, b);
          best[i] = take ? v : b;
          at[i] = take ? base + static_cast<int32_t>(i) * s : at[i];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const float v = src[i], b = best[i];
          best[i] = beats(v, b) ? v : b;
        }
      }
    }
  }
}

// [lo, hi): the output columns whose taps along W all lie in the input (contiguous: window
// starts grow with the column).
TapRange interior_columns(const Windows& w) {
  TapRange c{w.out[2], w.out[2]};
  for (int64_t o = 0; o < w.out[2]; ++o) {
    const TapRange t = w.taps_of[2][o];
    if (t.lo == 0 && t.hi == w.kernel[2]) {
      if (c.lo == w.out[2]) c.lo = o;
      c.hi = o + 1;
    }
  }
  return c;
}

}  // namespace

bool max_pool_rows_apply(const Windows& w) {
  // Offsets, the padded rows' included, must fit in int32.
  const int64_t padded_row = w.pad_begin[2] + w.in[2] + w.pad_end[2] + w.kernel[2] * w.dilation[2] + w.stride[2];
  return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1 &&
         w.in[1] * padded_row <= std::numeric_limits<int32_t>::max();
}

void max_pool_plane_rows(const Windows& w, const float* x, float* y, int32_t* argmax) {
  const int64_t width = w.in[2], out_w = w.out[2], dw = w.dilation[2];
  const TapRange inner = interior_columns(w);
  const Phases phases = split_plane(w, x);
  for (int64_t oy = 0; oy < w.out[1]; ++oy) {
    float* best = y + oy * out_w;  // (out_w)
    int32_t* at = argmax ? argmax + oy * out_w : nullptr;
    const TapRange rows = w.taps_of[1][oy];
    const int64_t sy = w.start_of[1][oy];
    const bool vectorized = inner.lo < inner.hi && rows.lo < rows.hi;
    if (vectorized) max_row(w, phases, oy, best, at);
    // Border columns (and every column of a row wholly in padding): tap by tap from the plane.
    for (int64_t ox = 0; ox < out_w; ++ox) {
      if (ox == inner.lo && vectorized) ox = inner.hi;
      if (ox >= out_w) break;
      const TapRange cols = w.taps_of[2][ox];
      int32_t best_at = -1;
      float best_value = std::numeric_limits<float>::lowest();
      for (int64_t ky = rows.lo; ky < rows.hi; ++ky)
        for (int64_t kx = cols.lo; kx < cols.hi; ++kx) {
          const int64_t p = (sy + ky * w.dilation[1]) * width + w.start_of[2][ox] + kx * dw;
          if (best_at < 0 || beats(x[p], best_value)) best_at = static_cast<int32_t>(p), best_value = x[p];
        }
      best[ox] = best_value;
      if (at) at[ox] = best_at;
    }
  }
}

}  // namespace trainrt
