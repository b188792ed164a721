#include "trainrt/kernels/cpu/average_pool_rows.h"

#include <algorithm>
#include <span>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// A run of window rows with the same in-bounds kernel rows and divisor, as the folds see it.
struct WindowRows {
  const float* first;   // the first row's first input row in the phases
  int64_t phase_step;   // to the next row's
  int64_t count;        // rows of windows
  std::span<const KernelTap> taps;  // of the in-bounds kernel rows (kernel_taps)
};

// Adds taps [t0, t0 + kTaps) (in their row-major order) to the sums of the rows' n columns each
// (rows n apart in y). kFirst: the sums start at 0 here (0 + the first tap: -0 becomes +0, as in
// the general walk), else y holds the earlier taps' sums. kLast: the sums are divided by `divisor`.
template <int kTaps, bool kFirst, bool kLast>
[[gnu::always_inline]] inline void fold_sum(const WindowRows& rows, size_t t0, int64_t n, float divisor,
                                            float* __restrict y) {
  for (int64_t r = 0; r < rows.count; ++r, y += n) {
    const float* src[kTaps];
    for (int t = 0; t < kTaps; ++t) src[t] = rows.first + (r * rows.phase_step + rows.taps[t0 + static_cast<size_t>(t)].phase_offset);
    for (int64_t i = 0; i < n; ++i) {
      float sum = kFirst ? 0.f : y[i];
      for (int t = 0; t < kTaps; ++t) sum += src[t][i];
      y[i] = kLast ? sum / divisor : sum;
    }
  }
}

// fold_sum of `count` taps from t0, count <= kTapsPerPass, as a constant count.
template <bool kFirst, bool kLast>
[[gnu::always_inline]] inline void fold_sum_group(const WindowRows& rows, size_t t0, size_t count, int64_t n,
                                                  float divisor, float* y) {
  static_assert(kTapsPerPass == 4);
  switch (count) {
    case 1: return fold_sum<1, kFirst, kLast>(rows, t0, n, divisor, y);
    case 2: return fold_sum<2, kFirst, kLast>(rows, t0, n, divisor, y);
    case 3: return fold_sum<3, kFirst, kLast>(rows, t0, n, divisor, y);
    default: return fold_sum<4, kFirst, kLast>(rows, t0, n, divisor, y);
  }
}

// The run's rows of n windows each (at least one tap), every column divided by the interior
// columns' count; the caller then redoes the border columns.
TRAINRT_SIMD_CLONES void average_rows(const WindowRows& rows, int64_t n, float divisor, float* y) {
  const size_t total = rows.taps.size(), pass = kTapsPerPass;
  for (size_t t = 0; t < total; t += pass) {
    const size_t group = std::min(total - t, pass);
    const bool first = t == 0, last = t + group == total;
    if (first && last) fold_sum_group<true, true>(rows, t, group, n, divisor, y);
    else if (first) fold_sum_group<true, false>(rows, t, group, n, divisor, y);
    else if (last) fold_sum_group<false, true>(rows, t, group, n, divisor, y);
    else fold_sum_group<false, false>(rows, t, group, n, divisor, y);
  }
}

}  // namespace

bool average_pool_rows_apply(const Windows& w) { return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1; }

void average_pool_plane_rows(const Windows& w, const float* x, float* y, bool count_include_pad) {
  const int64_t out_w = w.out[2], sh = w.stride[1];
  const TapRange inner = interior_columns(w);
  const Phases phases = split_plane(w, x);
  const std::span<const KernelTap> taps = kernel_taps(w, phases);
  const TapRange d0 = w.taps_of[0][0];  // the leading dim of extent 1
  // The divisor of row oy's interior windows (they all have the same).
  auto interior_count = [&](int64_t oy) {
    return w.count({d0, w.taps_of[1][oy], w.taps_of[2][inner.lo]}, {0, w.start_of[1][oy], w.start_of[2][inner.lo]},
                   count_include_pad);
  };
  for (int64_t oy = 0, run_end = 0; oy < w.out[1]; oy = run_end) {
    const TapRange rows = w.taps_of[1][oy];
    const bool vectorized = inner.lo < inner.hi && rows.lo < rows.hi;
    run_end = oy + 1;
    if (vectorized) {
      // Rows with oy's kernel rows and divisor (with count_include_pad the divisor may change
      // where the kernel rows do not).
      const int64_t n = interior_count(oy), like = rows_like(w, oy);
      while (run_end < like && interior_count(run_end) == n) ++run_end;
      const auto kw = static_cast<size_t>(w.kernel[2]);
      const WindowRows run{phases.data + w.start_of[1][oy] * phases.row_stride, sh * phases.row_stride, run_end - oy,
                           taps.subspan(static_cast<size_t>(rows.lo) * kw, static_cast<size_t>(rows.hi - rows.lo) * kw)};
      average_rows(run, out_w, static_cast<float>(n), y + oy * out_w);
    }
    // Border columns (and every column of a row wholly in padding): the general walk.
    for (int64_t r = oy; r < run_end; ++r) {
      for (int64_t ox = 0; ox < out_w; ++ox) {
        if (ox == inner.lo && vectorized) ox = inner.hi;
        if (ox >= out_w) break;
        const std::array<TapRange, 3> range{d0, rows, w.taps_of[2][ox]};
        const std::array<int64_t, 3> start{0, w.start_of[1][r], w.start_of[2][ox]};
        float sum = 0;
        w.for_each_tap(range, start, [&](int64_t t) { sum += x[t]; });
        const int64_t n = w.count(range, start, count_include_pad);
        y[r * out_w + ox] = n == 0 ? 0.f : sum / static_cast<float>(n);
      }
    }
  }
}

}  // namespace trainrt
