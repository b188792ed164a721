// The "phase" layout of a pooling plane that the vectorized row paths (max_pool_rows.h,
// average_pool_rows.h, average_pool_grad_rows.h) run on, and the tables they walk it with.
//
// Input row y, padded by pad_begin on the left and to the right, is split into its sw phases
// (phase r holds the padded columns r, r + sw, r + 2 sw, ...), each wq long. Tap kx of output
// column ox reads padded column ox * sw + kx * dw, which is element ox + kx * dw / sw of phase
// kx * dw % sw, so every tap of a row of windows is one contiguous, stride-1 loop over the output
// columns. (Strided loads straight from the plane are peeled by GCC into scalar code on rows
// shorter than 17 windows, the common case.)
//
// Rows of the split layout (padded planes) start on 64-byte boundaries (row_stride a multiple of
// 16 floats): the passes over a row then load whole cache lines at kx * dw / sw == 0.
//
// The row paths fold the taps of a row of windows (KernelTap: where each tap's values start) a few
// per pass (kTapsPerPass). One pass per tap, a store and a reload of the running results each,
// made 3x3 stride 2 pad 1 on (64, 32, 32, 32) 6.7x slower than 2x2 stride 2 for 2.25x the taps,
// slower still when y and the phase buffer fell 4 KiB apart (false store-to-load aliasing). And
// they take a run of window rows per call (rows_like): a row of 16 windows is one vector whose
// taps form one chain of dependent compares; with a call per row, the chains did not overlap.
//
//   const Phases ph = split_plane(w, x, -inf);                  // (sw, H, row_stride) or x itself
//   const auto taps = kernel_taps(w, ph);                        // (ky, kx) -> where its values start
//   const float* src = ph.data + sy * ph.row_stride + taps[t].phase_offset;  // tap t, columns 0, 1, ...
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "trainrt/kernels/cpu/pool_windows.h"

namespace trainrt {

// Taps folded per pass over a row of windows: a pass loads the running result once, folds up to
// kTapsPerPass taps into it in registers and stores it once.
inline constexpr int kTapsPerPass = 4;

// Pass p of the fewest passes over `taps` taps, the taps split as evenly as possible (sizes differ
// by at most one, larger first): 9 taps go 3, 3, 3 rather than 4, 4, 1. (GCC 12 left the argmax
// fold of a single tap scalar, a branch per window; it was half of 3x3 MaxPoolGrad's time.)
struct TapPass {
  size_t begin, count;
};
inline size_t tap_passes(size_t taps) { return (taps + kTapsPerPass - 1) / kTapsPerPass; }
inline TapPass tap_pass(size_t taps, size_t passes, size_t p) {
  const size_t base = taps / passes, larger = taps % passes;
  return {p * base + std::min(p, larger), base + (p < larger ? 1 : 0)};
}

// Phase r of input row y starts at data + (r * height + y) * row_stride.
struct Phases {
  int64_t row_stride = 0, height = 0;
  const float* data = nullptr;
};

// wq: the length of one phase row, so that the padded row reaches the last tap of the last window.
int64_t phase_width(const Windows& w);

// Plane x (H, W) in the phase layout: x itself where that is already it (sw 1, no padding), else a
// thread-local buffer valid until the next call on the thread. Padding holds `pad`: the border
// columns read it (max pooling pads with -inf, which never beats a tap; average pooling with +0,
// which leaves every sum as it is).
Phases split_plane(const Windows& w, const float* x, float pad);

// A plane in the phase layout to accumulate into (AveragePoolGrad's dX): phase r of input row y at
// data + (r * height + y) * row_stride, rows of wq elements on 64-byte boundaries.
struct PhaseSums {
  int64_t row_stride = 0, height = 0;
  float* data = nullptr;
  float* row(int64_t y, int64_t r) const { return data + (r * height + y) * row_stride; }
};

// The phase layout of a (H, W) plane for w, all +0: a thread-local buffer valid until the next call
// on the thread.
PhaseSums zeroed_phases(const Windows& w);

// dx (H, W) = the unpadded columns of the phases (the padding columns are dropped).
void merge_phases(const Windows& w, const PhaseSums& ph, float* dx);

// Tap (ky, kx) of the kernel for a row of windows whose first input row is sy: its values for
// output columns 0, 1, ... are ph.data[sy * ph.row_stride + phase_offset + i], the value for
// column i sits at plane offset sy * W + plane_offset + i * sw.
struct KernelTap {
  int64_t phase_offset, plane_offset;
};

// Every tap of the kernel, row-major (ky * kernel_w + kx: the taps of kernel rows [lo, hi) are
// entries [lo * kernel_w, hi * kernel_w)), for planes split as ph. Thread-local storage, valid
// until the next call on the thread.
std::span<const KernelTap> kernel_taps(const Windows& w, const Phases& ph);

// The end of the run of window rows from oy on that have oy's in-bounds kernel rows (taps_of[1]):
// the row paths fold a run in one call, its rows' independent chains overlapping in the core.
int64_t rows_like(const Windows& w, int64_t oy);

// [lo, hi): the output columns whose taps along W all lie in the input (contiguous: window
// starts grow with the column).
TapRange interior_columns(const Windows& w);

}  // namespace trainrt
