// The "phase" layout of a pooling plane that the vectorized row paths (max_pool_rows.h,
// average_pool_rows.h) run on, and the output columns those paths vectorize.
//
// Input row y, padded by pad_begin on the left and to the right, is split into its sw phases
// (phase r holds the padded columns r, r + sw, r + 2 sw, ...), each wq long. Tap kx of output
// column ox reads padded column ox * sw + kx * dw, which is element ox + kx * dw / sw of phase
// kx * dw % sw, so every tap of a row of windows is one contiguous, stride-1 loop over the output
// columns. (Strided loads straight from the plane are peeled by GCC into scalar code on rows
// shorter than 17 windows, the common case.)
//
//   const Phases ph = split_plane(w, x);                       // (sw, H, wq) or x itself
//   const float* src = ph.row(in_y, kx * dw % sw) + kx * dw / sw;  // tap kx of columns 0, 1, ...
#pragma once

#include <cstdint>

#include "trainrt/kernels/cpu/pool_windows.h"

namespace trainrt {

// Phase r of input row y starts at data + (r * height + y) * wq.
struct Phases {
  int64_t wq = 0, height = 0;
  const float* data = nullptr;
  const float* row(int64_t y, int64_t r) const { return data + (r * height + y) * wq; }
};

// wq: the length of one phase row, so that the padded row reaches the last tap of the last window.
int64_t phase_width(const Windows& w);

// Plane x (H, W) in the phase layout: x itself where that is already it (sw 1, no padding), else a
// thread-local buffer valid until the next call on the thread. Padding holds -inf: the callers
// recompute the border columns, the only ones that read it.
Phases split_plane(const Windows& w, const float* x);

// [lo, hi): the output columns whose taps along W all lie in the input (contiguous: window
// starts grow with the column).
TapRange interior_columns(const Windows& w);

}  // namespace trainrt
