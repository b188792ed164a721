// Vectorized AveragePoolGrad of one f32 plane with 1 or 2 spatial dims: the fast path of
// pool_kernels.cc, bit-identical to its general walk.
//
// The general walk starts dX at +0 and, window by window in row-major order, adds g = dY / count
// (Windows::count; windows counting no tap are skipped) to each of the window's in-bounds taps. So
// every dX element is +0 plus its windows' g in window order. Here dX is accumulated in the phase
// layout of pool_phases.h (PhaseSums), where tap (ky, kx) of a row of windows is one contiguous
// run: for each output row in order, each in-bounds kernel row, and kx from last to first, the
// row's g is added along that run. Within an output row a dX element's windows then come in
// ascending column order (the later kx, the earlier window), so every element takes its g in the
// general walk's order; padding columns collect g too and are dropped when the phases are merged
// back into dX.
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
