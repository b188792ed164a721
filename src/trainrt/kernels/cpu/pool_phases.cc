#include "trainrt/kernels/cpu/pool_phases.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "trainrt/core/simd.h"

namespace trainrt {
namespace {

// even[j] = src[2 j], odd[j] = src[2 j + 1] for j < n (a full group of two loads: no peeling).
[[gnu::always_inline]] inline void deinterleave(const float* src, float* __restrict even, float* __restrict odd,
                                                int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    even[j] = src[2 * j];
    odd[j] = src[2 * j + 1];
  }
}

// Unpadded rows whose width is a multiple of sw: the plane split as one long row.
TRAINRT_SIMD_CLONES void split_whole(const float* x, int64_t n, int64_t sw, float* __restrict dst) {
  if (sw == 2) {
    deinterleave(x, dst, dst + n / 2, n / 2);
  } else {
    for (int64_t r = 0; r < sw; ++r)
      for (int64_t j = 0; j < n / sw; ++j) dst[r * (n / sw) + j] = x[j * sw + r];
  }
}

// Row by row through a padded staging row (before + w + after = wq * sw, padding -inf: any value
// would do, border columns are recomputed from the plane).
TRAINRT_SIMD_CLONES void split_padded(const float* x, int64_t height, int64_t w, int64_t before, int64_t wq,
                                      int64_t sw, float* __restrict staging, float* __restrict dst) {
  const int64_t padded = wq * sw;
  for (int64_t i = 0; i < padded; ++i) staging[i] = -std::numeric_limits<float>::infinity();
  for (int64_t y = 0; y < height; ++y) {
    const float* src = x + y * w;
    for (int64_t i = 0; i < w; ++i) staging[before + i] = src[i];
    float* out = dst + y * wq;  // phase r at out + r * height * wq
    if (sw == 1) {
      for (int64_t j = 0; j < wq; ++j) out[j] = staging[j];
    } else if (sw == 2) {
      deinterleave(staging, out, out + height * wq, wq);
    } else {
      for (int64_t r = 0; r < sw; ++r)
        for (int64_t j = 0; j < wq; ++j) out[r * height * wq + j] = staging[j * sw + r];
    }
  }
}

}  // namespace

int64_t phase_width(const Windows& w) {
  const int64_t sw = w.stride[2];
  const int64_t reach = (w.out[2] - 1) * sw + (w.kernel[2] - 1) * w.dilation[2] + 1;
  return (std::max(reach, w.pad_begin[2] + w.in[2]) + sw - 1) / sw;
}

Phases split_plane(const Windows& w, const float* x) {
  const int64_t sw = w.stride[2], before = w.pad_begin[2], height = w.in[1], width = w.in[2];
  const int64_t wq = phase_width(w);
  if (before == 0 && wq * sw == width && sw == 1) return {wq, height, x};
  static thread_local std::vector<float> buffer;  // keeps its largest size: no steady-state allocation
  buffer.resize(static_cast<size_t>(wq * sw * (height + 1)));
  float* out = buffer.data();
  if (before == 0 && wq * sw == width) split_whole(x, height * width, sw, out);
  else split_padded(x, height, width, before, wq, sw, out + wq * sw * height, out);
  return {wq, height, out};
}

TapRange interior_columns(const Windows& w) {
  TapRange c{w.out[2], w.out[2]};
  for (int64_t o = 0; o < w.out[2]; ++o) {
    const TapRange t = w.taps_of[2][o];
    if (t.lo == 0 && t.hi == w.kernel[2]) {
      if (c.lo == w.out[2]) c.lo = o;
      c.hi = o + 1;
    }
  }
  return c;
}

}  // namespace trainrt
