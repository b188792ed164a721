#include "trainrt/kernels/cpu/max_pool_rows.h"

#include <algorithm>
#include <limits>
#include <span>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// A run of window rows with the same in-bounds kernel rows, as the folds see it.
struct WindowRows {
  const float* phases;
  int64_t phase_row, plane_row;    // the first row's first input row: offsets in the phases and the plane
  int64_t phase_step, plane_step;  // to the next row's
  int64_t count;                   // rows of windows
  std::span<const KernelTap> taps;  // of the in-bounds kernel rows (kernel_taps)
};

// Folds taps [t0, t0 + kTaps) (in their row-major order) into the rows' n columns each (rows
// out_w apart in best and at): best = the first largest tap so far (beats()), at = its plane
// offset. kFirst: these taps start the fold, else best and at hold the earlier taps' result.
template <int kTaps, bool kArgmax, bool kFirst>
[[gnu::always_inline]] inline void fold_max(const WindowRows& rows, size_t t0, int64_t n, int64_t out_w, int32_t sw,
                                            float* __restrict best, int32_t* __restrict at) {
  for (int64_t r = 0; r < rows.count; ++r, best += out_w, at += kArgmax ? out_w : 0) {
    const float* src[kTaps];
    int32_t base[kTaps];
    for (int t = 0; t < kTaps; ++t) {
      const KernelTap& tap = rows.taps[t0 + static_cast<size_t>(t)];
      src[t] = rows.phases + (rows.phase_row + r * rows.phase_step + tap.phase_offset);
      base[t] = static_cast<int32_t>(rows.plane_row + r * rows.plane_step + tap.plane_offset);
    }
    for (int64_t i = 0; i < n; ++i) {
      const auto column = static_cast<int32_t>(i) * sw;
      float b = kFirst ? src[0][i] : best[i];
      int32_t a = kFirst ? base[0] + column : (kArgmax ? at[i] : 0);
      for (int t = kFirst ? 1 : 0; t < kTaps; ++t) {
        const float v = src[t][i];
        const bool take = beats(v, b);
        b = take ? v : b;
        if constexpr (kArgmax) a = take ? base[t] + column : a;
      }
      best[i] = b;
      if constexpr (kArgmax) at[i] = a;
    }
  }
}

// fold_max of `count` taps from t0, count <= kTapsPerPass, as a constant count.
template <bool kArgmax, bool kFirst>
[[gnu::always_inline]] inline void fold_max_group(const WindowRows& rows, size_t t0, size_t count, int64_t n,
                                                  int64_t out_w, int32_t sw, float* best, int32_t* at) {
  static_assert(kTapsPerPass == 4);
  switch (count) {
    case 1: return fold_max<1, kArgmax, kFirst>(rows, t0, n, out_w, sw, best, at);
    case 2: return fold_max<2, kArgmax, kFirst>(rows, t0, n, out_w, sw, best, at);
    case 3: return fold_max<3, kArgmax, kFirst>(rows, t0, n, out_w, sw, best, at);
    default: return fold_max<4, kArgmax, kFirst>(rows, t0, n, out_w, sw, best, at);
  }
}

// The run's rows of windows, n = out_w each (at least one tap); the caller then redoes the border
// columns.
template <bool kArgmax>
[[gnu::always_inline]] inline void max_rows(const WindowRows& rows, int64_t out_w, int64_t sw, float* best,
                                            int32_t* at) {
  const auto s = static_cast<int32_t>(sw);
  const size_t taps = rows.taps.size(), passes = tap_passes(taps);
  for (size_t p = 0; p < passes; ++p) {
    const TapPass pass = tap_pass(taps, passes, p);
    if (p == 0) fold_max_group<kArgmax, true>(rows, pass.begin, pass.count, out_w, out_w, s, best, at);
    else fold_max_group<kArgmax, false>(rows, pass.begin, pass.count, out_w, out_w, s, best, at);
  }
}

TRAINRT_SIMD_CLONES void max_rows_values(const WindowRows& rows, int64_t out_w, int64_t sw, float* best) {
  max_rows<false>(rows, out_w, sw, best, nullptr);
}

TRAINRT_SIMD_CLONES void max_rows_argmax(const WindowRows& rows, int64_t out_w, int64_t sw, float* best,
                                         int32_t* at) {
  max_rows<true>(rows, out_w, sw, best, at);
}

}  // namespace

bool max_pool_rows_apply(const Windows& w) {
  // Offsets, the padded rows' included, must fit in int32.
  const int64_t padded_row = w.pad_begin[2] + w.in[2] + w.pad_end[2] + w.kernel[2] * w.dilation[2] + w.stride[2];
  return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1 && w.kernel_fits_padded_input() &&
         w.in[1] * padded_row <= std::numeric_limits<int32_t>::max();
}

void max_pool_plane_rows(const Windows& w, const float* x, float* y, int32_t* argmax) {
  const int64_t width = w.in[2], out_w = w.out[2], dw = w.dilation[2], sh = w.stride[1];
  const TapRange inner = interior_columns(w);
  const Phases phases = split_plane(w, x, -std::numeric_limits<float>::infinity());
  const std::span<const KernelTap> taps = kernel_taps(w, phases);
  for (int64_t oy = 0, run_end = 0; oy < w.out[1]; oy = run_end) {
    run_end = rows_like(w, oy);
    const TapRange rows = w.taps_of[1][oy];
    const bool vectorized = rows.lo < rows.hi;
    if (vectorized) {
      const auto kw = static_cast<size_t>(w.kernel[2]);
      const int64_t sy = w.start_of[1][oy];
      const WindowRows run{phases.data,
                           sy * phases.row_stride,
                           sy * width,
                           sh * phases.row_stride,
                           sh * width,
                           run_end - oy,
                           taps.subspan(static_cast<size_t>(rows.lo) * kw, static_cast<size_t>(rows.hi - rows.lo) * kw)};
      if (argmax) max_rows_argmax(run, out_w, w.stride[2], y + oy * out_w, argmax + oy * out_w);
      else max_rows_values(run, out_w, w.stride[2], y + oy * out_w);
    }
    // Border columns whose result may not be the general walk's: tap by tap from the plane. The
    // fold read their padding taps as -inf, which never beats a tap, so a result above -inf (or
    // NaN) is an in-bounds tap, the first largest; a -inf may be a padding tap's, or a window
    // wholly in padding (lowest float, argmax -1 in the general walk).
    for (int64_t r = oy; r < run_end; ++r) {
      const int64_t sy = w.start_of[1][r];
      for (int64_t ox = 0; ox < out_w; ++ox) {
        if (ox == inner.lo && inner.lo < inner.hi && vectorized) ox = inner.hi;
        if (ox >= out_w) break;
        if (vectorized && y[r * out_w + ox] != -std::numeric_limits<float>::infinity()) continue;
        const TapRange cols = w.taps_of[2][ox];
        int32_t best_at = -1;
        float best_value = std::numeric_limits<float>::lowest();
        for (int64_t ky = rows.lo; ky < rows.hi; ++ky)
          for (int64_t kx = cols.lo; kx < cols.hi; ++kx) {
            const int64_t p = (sy + ky * w.dilation[1]) * width + w.start_of[2][ox] + kx * dw;
            if (best_at < 0 || beats(x[p], best_value)) best_at = static_cast<int32_t>(p), best_value = x[p];
          }
        y[r * out_w + ox] = best_value;
        if (argmax) argmax[r * out_w + ox] = best_at;
      }
    }
  }
}

}  // namespace trainrt
