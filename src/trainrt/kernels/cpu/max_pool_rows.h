// Vectorized max pooling of one f32 plane with 1 or 2 spatial dims (MaxPool, and the argmax that
// MaxPoolGrad routes dY by): the fast path of pool_kernels.cc.
//
// Windows are taken a run of output rows at a time (rows with the same in-bounds kernel rows), on
// the phase layout of pool_phases.h padded with -inf. Every tap (ky, kx) of the in-bounds kernel
// rows is folded into all the run's columns, a few taps per pass, vectorized along the output
// width: loads of the phases, compare, blend. Taps are folded in row-major order with beats()
// (pool_windows.h), so values and argmax agree bit for bit with the general path: first largest
// tap, a NaN over anything else, the first of several NaNs. A padding tap (-inf) never beats one,
// so only border columns whose result is -inf are redone tap by tap (a padding tap may hold the
// argmax there, and a window wholly in padding gives lowest float and argmax -1).
//
//   if (max_pool_rows_apply(w)) max_pool_plane_rows(w, x_plane, y_plane, argmax_or_null);
#pragma once

#include <cstdint>

#include "trainrt/kernels/cpu/pool_windows.h"

namespace trainrt {

// Whether max_pool_plane_rows handles w: at most 2 spatial dims (any kernel, stride, dilation,
// padding, ceil_mode) and planes whose offsets fit in int32.
bool max_pool_rows_apply(const Windows& w);

// One (H, W) plane x (in_plane) -> y (out_plane): each window's largest tap; argmax (out_plane,
// may be null): its offset within the plane. A window wholly in padding gives y = lowest float and
// argmax -1.
void max_pool_plane_rows(const Windows& w, const float* x, float* y, int32_t* argmax);

}  // namespace trainrt
