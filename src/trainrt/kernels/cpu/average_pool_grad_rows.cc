#include "trainrt/kernels/cpu/average_pool_grad_rows.h"

#include <vector>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// g (n) = dy / divisor, 0 where the divisor is 0 (a window counting no tap adds nothing; it has
// no in-bounds tap either, so its 0 only reaches padding).
TRAINRT_SIMD_CLONES void row_gradient(const float* dy, const float* divisor, int64_t n, float* __restrict g) {
  for (int64_t i = 0; i < n; ++i) g[i] = divisor[i] == 0.f ? 0.f : dy[i] / divisor[i];
}

// Every row of windows' g (out_w each, rows out_w apart) added along its runs (run t of row oy at
// runs[...], as many per row as the row has in-bounds taps), run after run in the order given
// (two runs may overlap).
TRAINRT_SIMD_CLONES void add_runs(const Windows& w, const float* __restrict g, float* const* runs) {
  const int64_t out_w = w.out[2];
  for (int64_t oy = 0; oy < w.out[1]; ++oy, g += out_w) {
    const int64_t taps = (w.taps_of[1][oy].hi - w.taps_of[1][oy].lo) * w.kernel[2];
    for (int64_t t = 0; t < taps; ++t, ++runs) {
      float* d = *runs;
      for (int64_t i = 0; i < out_w; ++i) d[i] += g[i];
    }
  }
}

}  // namespace

bool average_pool_grad_rows_apply(const Windows& w) { return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1; }

void average_pool_grad_plane_rows(const Windows& w, const float* dy, float* dx, bool count_include_pad) {
  const int64_t out_h = w.out[1], out_w = w.out[2], sw = w.stride[2], dw = w.dilation[2];
  const PhaseSums sums = zeroed_phases(w);
  // Every window's divisor, (d0 * rows(oy)) * columns(ox): the factors of Windows::count by dim.
  // Thread-local storage that keeps its largest size: no steady-state allocation.
  static thread_local std::vector<float> divisor, g;
  static thread_local std::vector<float*> runs;
  divisor.resize(static_cast<size_t>(out_h * out_w));
  g.resize(divisor.size());
  const int64_t d0 = w.count_along(0, w.taps_of[0][0], w.start_of[0][0], count_include_pad);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const int64_t rows = d0 * w.count_along(1, w.taps_of[1][oy], w.start_of[1][oy], count_include_pad);
    for (int64_t ox = 0; ox < out_w; ++ox)
      divisor[static_cast<size_t>(oy * out_w + ox)] =
          static_cast<float>(rows * w.count_along(2, w.taps_of[2][ox], w.start_of[2][ox], count_include_pad));
  }
  row_gradient(dy, divisor.data(), out_h * out_w, g.data());
  // The runs every row of windows adds its g to, in the order that keeps each element's terms in
  // window order: rows of windows in order, kx from last to first.
  runs.clear();
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const TapRange rows = w.taps_of[1][oy];  // empty: a row wholly in padding adds nothing
    for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
      const int64_t in_y = w.start_of[1][oy] + ky * w.dilation[1];
      for (int64_t kx = w.kernel[2]; kx-- > 0;) runs.push_back(sums.row(in_y, kx * dw % sw) + kx * dw / sw);
    }
  }
  add_runs(w, g.data(), runs.data());
  merge_phases(w, sums, dx);
}

}  // namespace trainrt
