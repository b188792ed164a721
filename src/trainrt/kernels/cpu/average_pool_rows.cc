#include "trainrt/kernels/cpu/average_pool_rows.h"

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// One output row of n = out_w windows: sum = 0 plus the taps of the in-bounds kernel rows in
// row-major order, from the phases (the border columns read padding; the caller redoes them).
TRAINRT_SIMD_CLONES void sum_row(const Windows& w, const Phases& ph, int64_t oy, float* __restrict sum) {
  const int64_t n = w.out[2], sw = w.stride[2], dw = w.dilation[2];
  const TapRange rows = w.taps_of[1][oy];
  for (int64_t i = 0; i < n; ++i) sum[i] = 0.f;
  for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
    const int64_t in_y = w.start_of[1][oy] + ky * w.dilation[1];
    for (int64_t kx = 0; kx < w.kernel[2]; ++kx) {
      const float* src = ph.row(in_y, kx * dw % sw) + kx * dw / sw;
      for (int64_t i = 0; i < n; ++i) sum[i] += src[i];
    }
  }
}

// y[i] /= count over [lo, hi).
TRAINRT_SIMD_CLONES void divide(float* y, int64_t lo, int64_t hi, float count) {
  for (int64_t i = lo; i < hi; ++i) y[i] /= count;
}

}  // namespace

bool average_pool_rows_apply(const Windows& w) { return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1; }

void average_pool_plane_rows(const Windows& w, const float* x, float* y, bool count_include_pad) {
  const int64_t out_w = w.out[2];
  const TapRange inner = interior_columns(w);
  const Phases phases = split_plane(w, x);
  const TapRange d0 = w.taps_of[0][0];  // the leading dim of extent 1
  for (int64_t oy = 0; oy < w.out[1]; ++oy) {
    float* row = y + oy * out_w;  // (out_w)
    const TapRange rows = w.taps_of[1][oy];
    const int64_t sy = w.start_of[1][oy];
    const bool vectorized = inner.lo < inner.hi && rows.lo < rows.hi;
    if (vectorized) {
      sum_row(w, phases, oy, row);
      // Every interior window of the row has the same count.
      const int64_t n = w.count({d0, rows, w.taps_of[2][inner.lo]}, {0, sy, w.start_of[2][inner.lo]},
                                count_include_pad);
      divide(row, inner.lo, inner.hi, static_cast<float>(n));
    }
    // Border columns (and every column of a row wholly in padding): the general walk.
    for (int64_t ox = 0; ox < out_w; ++ox) {
      if (ox == inner.lo && vectorized) ox = inner.hi;
      if (ox >= out_w) break;
      const std::array<TapRange, 3> r{d0, rows, w.taps_of[2][ox]};
      const std::array<int64_t, 3> start{0, sy, w.start_of[2][ox]};
      float sum = 0;
      w.for_each_tap(r, start, [&](int64_t t) { sum += x[t]; });
      const int64_t n = w.count(r, start, count_include_pad);
      row[ox] = n == 0 ? 0.f : sum / static_cast<float>(n);
    }
  }
}

}  // namespace trainrt
