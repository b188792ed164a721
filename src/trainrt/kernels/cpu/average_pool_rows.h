// Vectorized average pooling of one f32 plane with 1 or 2 spatial dims (AveragePool): the fast
// path of pool_kernels.cc.
//
// Windows are taken a run of output rows at a time (rows with the same in-bounds kernel rows), on
// the phase layout of pool_phases.h padded with +0. Every in-bounds kernel row's taps (ky, kx) are
// folded into the sums of all the run's columns, a few taps per pass, vectorized along the output
// width. The sums start at 0 and take the taps in row-major order; a padding tap adds +0, which
// changes no sum (none is ever -0), so border columns get the general walk's sums too. Each is
// divided by its window's count (Windows::count, per column), so the outputs agree with the
// general walk bit for bit (NaN and inf included).
//
//   if (average_pool_rows_apply(w)) average_pool_plane_rows(w, x_plane, y_plane, count_include_pad);
#pragma once

#include "trainrt/kernels/cpu/pool_windows.h"

namespace trainrt {

// Whether average_pool_plane_rows handles w: at most 2 spatial dims (any kernel, stride, dilation,
// padding, ceil_mode).
bool average_pool_rows_apply(const Windows& w);

// One (H, W) plane x (in_plane) -> y (out_plane): each window's in-bounds taps summed, divided by
// Windows::count(); a window with a count of 0 gives 0.
void average_pool_plane_rows(const Windows& w, const float* x, float* y, bool count_include_pad);

}  // namespace trainrt
