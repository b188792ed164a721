#include "trainrt/kernels/cpu/max_pool_rows.h"

#include <limits>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

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
