// Vectorized average pooling of one f32 plane with 1 or 2 spatial dims (AveragePool): the fast
// path of pool_kernels.cc.
//
// Windows are taken one output row at a time, on the phase layout of pool_phases.h. Over the row's
// interior columns (those whose taps along W all lie in the input) each in-bounds tap (ky, kx) is
// one pass over the row, vectorized along the output width: sum[i] += tap. The sums start at 0 and
// take the taps in row-major order, then are divided by the window's count, exactly as the general
// walk does, so the outputs agree with it bit for bit (NaN and inf included). The columns whose
// window crosses the left or right border are done tap by tap.
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
