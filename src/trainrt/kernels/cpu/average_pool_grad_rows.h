// Vectorized AveragePoolGrad of one f32 plane with 1 or 2 spatial dims: the fast path of
// pool_kernels.cc, bit-identical to its general walk.
//
// The general walk starts dX at +0 and, window by window in row-major order, adds g = dY / count
// (Windows::count; windows counting no tap are skipped) to each of the window's in-bounds taps. So
// every dX element is +0 plus its windows' g in window order. Here dX is accumulated in the phase
// layout of pool_phases.h (PhaseSums): for each row of windows in order and each in-bounds kernel
// row, phase r of the input row takes, element by element, g[j - q] for each of its taps kx
// (q = kx * dw / sw), kx from last to first, a few taps per pass in registers. Within a row of
// windows an element's windows then come in ascending column order (the later kx, the earlier
// window), so every element takes its g in the general walk's order. Where a window does not
// exist, g reads a zero margin, and padding columns collect g too and are dropped when the phases
// are merged back into dX: adding +0 changes nothing (no element is ever -0). Overlapping taps
// added one pass each, a store and a reload of a shifted run per tap, ran 1.3x slower on 3x3
// stride 2 pad 1 (store-to-load forwarding fails on the shifted runs).
//
//   if (average_pool_grad_rows_apply(w)) average_pool_grad_plane_rows(w, dy_plane, dx_plane, count_include_pad);
#pragma once

#include "trainrt/kernels/cpu/pool_windows.h"

namespace trainrt {

// Whether average_pool_grad_plane_rows handles w: at most 2 spatial dims (any kernel, stride,
// dilation, padding, ceil_mode).
bool average_pool_grad_rows_apply(const Windows& w);

// One plane dy (out_plane) -> dx (in_plane): each window's dY divided by its count, added to each
// of its in-bounds taps; windows counting no tap add nothing.
void average_pool_grad_plane_rows(const Windows& w, const float* dy, float* dx, bool count_include_pad);

}  // namespace trainrt
