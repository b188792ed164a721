// Vectorized max pooling of one f32 plane with 1 or 2 spatial dims (MaxPool, and the argmax that
// MaxPoolGrad routes dY by): the fast path of pool_kernels.cc.
//
// Windows are taken one output row at a time, on the phase layout of pool_phases.h. Over the row's interior columns (those whose taps
// along W all lie in the input) each tap (ky, kx) is one pass over the row, vectorized along the
// output width: loads at stride sw (contiguous for sw 1, deinterleaving for sw 2), compare, blend.
// The columns whose window crosses the left or right border are done tap by tap. Taps are folded
// in row-major order with beats() (pool_windows.h), so values and argmax agree bit for bit with
// the general path: first largest tap, a NaN over anything else, the first of several NaNs.
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
