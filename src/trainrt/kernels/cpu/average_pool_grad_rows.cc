#include "trainrt/kernels/cpu/average_pool_grad_rows.h"

#include <span>
#include <vector>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// Every window's g = dY / divisor (0 where the divisor is 0: a window counting no tap adds nothing,
// and it has no in-bounds tap either). Row oy of g starts at g + oy * g_stride, with `margin`
// zeros before it and zeros after it up to the next row's margin.
TRAINRT_SIMD_CLONES void window_gradients(const float* dy, const float* divisor, int64_t out_h, int64_t out_w,
                                          int64_t margin, int64_t g_stride, float* __restrict g) {
  for (int64_t oy = 0; oy < out_h; ++oy) {
    float* row = g + oy * g_stride;
    for (int64_t j = -margin; j < 0; ++j) row[j] = 0.f;
    for (int64_t i = 0; i < out_w; ++i) {
      const float d = divisor[oy * out_w + i];
      row[i] = d == 0.f ? 0.f : dy[oy * out_w + i] / d;
    }
    for (int64_t j = out_w; j < g_stride - margin; ++j) row[j] = 0.f;
  }
}

// dst[j] += g[j - shift[0]], += g[j - shift[1]], ... (kShifts terms, in that order) for j < n.
template <int kShifts>
[[gnu::always_inline]] inline void add_shifted(const float* g, const int64_t* shift, int64_t n, float* __restrict dst) {
  const float* src[kShifts];
  for (int t = 0; t < kShifts; ++t) src[t] = g - shift[t];
  for (int64_t j = 0; j < n; ++j) {
    float acc = dst[j];
    for (int t = 0; t < kShifts; ++t) acc += src[t][j];
    dst[j] = acc;
  }
}

// add_shifted of `count` terms, count <= kTapsPerPass, as a constant count.
[[gnu::always_inline]] inline void add_shifted_group(const float* g, const int64_t* shift, size_t count, int64_t n,
                                                     float* dst) {
  static_assert(kTapsPerPass == 4);
  switch (count) {
    case 1: return add_shifted<1>(g, shift, n, dst);
    case 2: return add_shifted<2>(g, shift, n, dst);
    case 3: return add_shifted<3>(g, shift, n, dst);
    default: return add_shifted<4>(g, shift, n, dst);
  }
}

// One pass of a phase's taps: shifts [begin, begin + count) of the phase's, applied to phase r.
struct ShiftPass {
  int64_t r;
  size_t begin, count;
};

// Every row of windows' g added to the phases. Row oy's taps of kernel row ky reach input row
// in_y: in phase r, tap kx (kx * dw % sw == r) adds g[j - q_kx] to element j, q_kx = kx * dw / sw.
// The passes hold each phase's q_kx, kx from last to first, so each element takes its windows' g
// in window order. Elements whose window does not exist read g's zero margins: adding +0 changes
// no element (none is ever -0).
TRAINRT_SIMD_CLONES void add_windows(const Windows& w, const PhaseSums& sums, const float* g, int64_t g_stride,
                                     const int64_t* shifts, std::span<const ShiftPass> passes, int64_t wq) {
  for (int64_t oy = 0; oy < w.out[1]; ++oy) {
    const TapRange rows = w.taps_of[1][oy];  // empty: a row wholly in padding adds nothing
    for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
      const int64_t in_y = w.start_of[1][oy] + ky * w.dilation[1];
      for (const ShiftPass& pass : passes)
        add_shifted_group(g + oy * g_stride, shifts + pass.begin, pass.count, wq, sums.row(in_y, pass.r));
    }
  }
}

}  // namespace

bool average_pool_grad_rows_apply(const Windows& w) {
  return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1 && w.kernel_fits_padded_input();
}

void average_pool_grad_plane_rows(const Windows& w, const float* dy, float* dx, bool count_include_pad) {
  const int64_t out_h = w.out[1], out_w = w.out[2], sw = w.stride[2], dw = w.dilation[2];
  const int64_t wq = phase_width(w), margin = (w.kernel[2] - 1) * dw / sw, g_stride = margin + wq;
  const PhaseSums sums = zeroed_phases(w);
  // Thread-local storage that keeps its largest size: no steady-state allocation.
  static thread_local std::vector<float> divisor, g;
  static thread_local std::vector<int64_t> shifts;
  static thread_local std::vector<ShiftPass> passes;
  // Every window's divisor, (d0 * rows(oy)) * columns(ox): the factors of Windows::count by dim.
  divisor.resize(static_cast<size_t>(out_h * out_w));
  const int64_t d0 = w.count_along(0, w.taps_of[0][0], w.start_of[0][0], count_include_pad);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const int64_t rows = d0 * w.count_along(1, w.taps_of[1][oy], w.start_of[1][oy], count_include_pad);
    for (int64_t ox = 0; ox < out_w; ++ox)
      divisor[static_cast<size_t>(oy * out_w + ox)] =
          static_cast<float>(rows * w.count_along(2, w.taps_of[2][ox], w.start_of[2][ox], count_include_pad));
  }
  g.resize(static_cast<size_t>(margin + out_h * g_stride));
  window_gradients(dy, divisor.data(), out_h, out_w, margin, g_stride, g.data() + margin);
  // Per phase, the shifts of its taps, kx from last to first, in passes of at most kTapsPerPass.
  shifts.clear();
  passes.clear();
  for (int64_t r = 0; r < sw; ++r) {
    const size_t first = shifts.size();
    for (int64_t kx = w.kernel[2]; kx-- > 0;)
      if (kx * dw % sw == r) shifts.push_back(kx * dw / sw);
    const size_t taps = shifts.size() - first, count = tap_passes(taps);
    for (size_t p = 0; p < count; ++p) {
      const TapPass pass = tap_pass(taps, count, p);
      passes.push_back({r, first + pass.begin, pass.count});
    }
  }
  add_windows(w, sums, g.data() + margin, g_stride, shifts.data(), passes, wq);
  merge_phases(w, sums, dx);
}

}  // namespace trainrt
