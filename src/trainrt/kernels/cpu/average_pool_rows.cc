#include "trainrt/kernels/cpu/average_pool_rows.h"

#include <algorithm>
#include <span>
#include <vector>

#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/pool_phases.h"

namespace trainrt {
namespace {

// A run of window rows with the same in-bounds kernel rows and divisors, as the folds see it.
struct WindowRows {
  const float* first;               // the first row's first input row in the phases
  int64_t phase_step;               // to the next row's
  int64_t count;                    // rows of windows
  std::span<const KernelTap> taps;  // of the in-bounds kernel rows (kernel_taps)
};

// Adds taps [t0, t0 + kTaps) (in their row-major order) to the sums of the rows' n columns each
// (rows n apart in y). kFirst: the sums start at 0 here (0 + the first tap: -0 becomes +0, as in
// the general walk), else y holds the earlier taps' sums. kLast: column i is divided by
// divisor[i].
template <int kTaps, bool kFirst, bool kLast>
[[gnu::always_inline]] inline void fold_sum(const WindowRows& rows, size_t t0, int64_t n, const float* divisor,
                                            float* __restrict y) {
  for (int64_t r = 0; r < rows.count; ++r, y += n) {
    const float* src[kTaps];
    for (int t = 0; t < kTaps; ++t)
      src[t] = rows.first + (r * rows.phase_step + rows.taps[t0 + static_cast<size_t>(t)].phase_offset);
    for (int64_t i = 0; i < n; ++i) {
      float sum = kFirst ? 0.f : y[i];
      for (int t = 0; t < kTaps; ++t) sum += src[t][i];
      y[i] = kLast ? sum / divisor[i] : sum;
    }
  }
}

// fold_sum of `count` taps from t0, count <= kTapsPerPass, as a constant count.
template <bool kFirst, bool kLast>
[[gnu::always_inline]] inline void fold_sum_group(const WindowRows& rows, size_t t0, size_t count, int64_t n,
                                                  const float* divisor, float* y) {
  static_assert(kTapsPerPass == 4);
  switch (count) {
    case 1: return fold_sum<1, kFirst, kLast>(rows, t0, n, divisor, y);
    case 2: return fold_sum<2, kFirst, kLast>(rows, t0, n, divisor, y);
    case 3: return fold_sum<3, kFirst, kLast>(rows, t0, n, divisor, y);
    default: return fold_sum<4, kFirst, kLast>(rows, t0, n, divisor, y);
  }
}

// The run's rows of n windows each (at least one tap), column i divided by divisor[i].
TRAINRT_SIMD_CLONES void average_rows(const WindowRows& rows, int64_t n, const float* divisor, float* y) {
  const size_t taps = rows.taps.size(), passes = tap_passes(taps);
  for (size_t p = 0; p < passes; ++p) {
    const TapPass pass = tap_pass(taps, passes, p);
    const bool first = p == 0, last = p + 1 == passes;
    if (first && last) fold_sum_group<true, true>(rows, pass.begin, pass.count, n, divisor, y);
    else if (first) fold_sum_group<true, false>(rows, pass.begin, pass.count, n, divisor, y);
    else if (last) fold_sum_group<false, true>(rows, pass.begin, pass.count, n, divisor, y);
    else fold_sum_group<false, false>(rows, pass.begin, pass.count, n, divisor, y);
  }
}

}  // namespace

bool average_pool_rows_apply(const Windows& w) {
  return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1 && w.kernel_fits_padded_input();
}

void average_pool_plane_rows(const Windows& w, const float* x, float* y, bool count_include_pad) {
  const int64_t out_w = w.out[2], sh = w.stride[1];
  // Padding +0: a padding tap leaves every sum as it is (no sum is ever -0), so border columns
  // get the general walk's sums too, and only their divisors differ.
  const Phases phases = split_plane(w, x, 0.f);
  const std::span<const KernelTap> taps = kernel_taps(w, phases);
  // A window's divisor (Windows::count) is (d0 * rows) * columns, each factor by dim: d0 (the
  // leading dim of extent 1), rows(oy), columns[ox].
  const int64_t d0 = w.count_along(0, w.taps_of[0][0], w.start_of[0][0], count_include_pad);
  auto rows_count = [&](int64_t oy) { return w.count_along(1, w.taps_of[1][oy], w.start_of[1][oy], count_include_pad); };
  // Per column: its factor, then (per run of rows) the divisor as a float. Thread-local storage
  // that keeps its largest size: no steady-state allocation.
  static thread_local std::vector<int64_t> columns;
  static thread_local std::vector<float> divisor;
  columns.resize(static_cast<size_t>(out_w));
  divisor.resize(static_cast<size_t>(out_w));
  bool empty_column = false;
  for (int64_t ox = 0; ox < out_w; ++ox) {
    columns[static_cast<size_t>(ox)] = w.count_along(2, w.taps_of[2][ox], w.start_of[2][ox], count_include_pad);
    empty_column = empty_column || columns[static_cast<size_t>(ox)] == 0;
  }
  for (int64_t oy = 0, run_end = 0; oy < w.out[1]; oy = run_end) {
    const TapRange rows = w.taps_of[1][oy];
    const int64_t rows_n = rows_count(oy);
    // Rows with oy's kernel rows and divisors (with count_include_pad the divisors may change
    // where the kernel rows do not).
    const int64_t like = rows_like(w, oy);
    run_end = oy + 1;
    while (run_end < like && rows_count(run_end) == rows_n) ++run_end;
    if (rows.lo == rows.hi) {  // rows wholly in padding: no taps, sums of 0, 0 / n = +0 (or 0 for n = 0)
      std::fill(y + oy * out_w, y + run_end * out_w, 0.f);
      continue;
    }
    for (int64_t ox = 0; ox < out_w; ++ox)
      divisor[static_cast<size_t>(ox)] = static_cast<float>(d0 * rows_n * columns[static_cast<size_t>(ox)]);
    const auto kw = static_cast<size_t>(w.kernel[2]);
    const WindowRows run{phases.data + w.start_of[1][oy] * phases.row_stride, sh * phases.row_stride, run_end - oy,
                         taps.subspan(static_cast<size_t>(rows.lo) * kw, static_cast<size_t>(rows.hi - rows.lo) * kw)};
    average_rows(run, out_w, divisor.data(), y + oy * out_w);
    if (!empty_column && rows_n != 0 && d0 != 0) continue;
    // Windows that count no tap: 0, where the fold divided 0 by 0.
    for (int64_t r = oy; r < run_end; ++r)
      for (int64_t ox = 0; ox < out_w; ++ox)
        if (divisor[static_cast<size_t>(ox)] == 0.f) y[r * out_w + ox] = 0.f;
  }
}

}  // namespace trainrt
