#include "trainrt/kernels/cpu/pool_phases.h"

#include <algorithm>
#include <cstdint>
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

// Where phase r of a padded row comes from: its elements [head, head + count) are x[first],
// x[first + sw], ... of the unpadded row; the others are padding.
struct PhaseSource {
  int64_t head, count, first;
};

PhaseSource phase_source(int64_t r, int64_t sw, int64_t before, int64_t width, int64_t wq) {
  // Phase element j is padded column r + j * sw, unpadded column r + j * sw - before.
  const int64_t head = std::min(wq, before > r ? (before - r + sw - 1) / sw : 0);
  const int64_t first = r + head * sw - before;
  const int64_t count = first >= width ? 0 : std::min(wq - head, (width - first + sw - 1) / sw);
  return {head, count, first};
}

// Row by row, straight from the plane into the phases (rows `stride` apart, phase r at
// dst + r * height * stride), padding `pad`. With sw 2 both phases come from one deinterleaving
// pass over the row.
TRAINRT_SIMD_CLONES void split_padded(const float* x, int64_t height, int64_t width, int64_t before, int64_t wq,
                                      int64_t stride, int64_t sw, float pad, float* __restrict dst) {
  for (int64_t r = 0; r < sw; ++r) {
    const PhaseSource ps = phase_source(r, sw, before, width, wq);
    for (int64_t y = 0; y < height; ++y) {
      float* out = dst + (r * height + y) * stride;
      for (int64_t j = 0; j < ps.head; ++j) out[j] = pad;
      for (int64_t j = ps.head + ps.count; j < wq; ++j) out[j] = pad;
    }
  }
  if (sw == 2) {
    // The phases' sources start at unpadded columns 0 and 1 (in some order): deinterleave the
    // row's pairs, then the last column of an odd width.
    const PhaseSource p0 = phase_source(0, 2, before, width, wq), p1 = phase_source(1, 2, before, width, wq);
    const PhaseSource& even = p0.first == 0 ? p0 : p1;
    const PhaseSource& odd = p0.first == 0 ? p1 : p0;
    float* even_dst = dst + (p0.first == 0 ? 0 : height * stride) + even.head;
    float* odd_dst = dst + (p0.first == 0 ? height * stride : 0) + odd.head;
    const int64_t pairs = std::min({width / 2, even.count, odd.count});
    for (int64_t y = 0; y < height; ++y) {
      const float* src = x + y * width;
      deinterleave(src, even_dst + y * stride, odd_dst + y * stride, pairs);
      for (int64_t j = pairs; j < even.count; ++j) even_dst[y * stride + j] = src[2 * j];
      for (int64_t j = pairs; j < odd.count; ++j) odd_dst[y * stride + j] = src[2 * j + 1];
    }
    return;
  }
  for (int64_t r = 0; r < sw; ++r) {
    const PhaseSource ps = phase_source(r, sw, before, width, wq);
    for (int64_t y = 0; y < height; ++y) {
      const float* src = x + y * width + ps.first;
      float* out = dst + (r * height + y) * stride + ps.head;
      for (int64_t j = 0; j < ps.count; ++j) out[j] = src[j * sw];
    }
  }
}

// dst[2 j] = even[j], dst[2 j + 1] = odd[j] for j < n.
[[gnu::always_inline]] inline void interleave(const float* __restrict even, const float* __restrict odd,
                                              float* __restrict dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    dst[2 * j] = even[j];
    dst[2 * j + 1] = odd[j];
  }
}

// The inverse of split_padded: each unpadded row gathered from its phases (with sw 2, one
// interleaving pass).
TRAINRT_SIMD_CLONES void merge_padded(const float* src, int64_t height, int64_t width, int64_t before, int64_t wq,
                                      int64_t stride, int64_t sw, float* __restrict dx) {
  if (sw == 2) {
    const PhaseSource p0 = phase_source(0, 2, before, width, wq), p1 = phase_source(1, 2, before, width, wq);
    const PhaseSource& even = p0.first == 0 ? p0 : p1;
    const PhaseSource& odd = p0.first == 0 ? p1 : p0;
    const float* even_src = src + (p0.first == 0 ? 0 : height * stride) + even.head;
    const float* odd_src = src + (p0.first == 0 ? height * stride : 0) + odd.head;
    const int64_t pairs = std::min({width / 2, even.count, odd.count});
    for (int64_t y = 0; y < height; ++y) {
      float* out = dx + y * width;
      interleave(even_src + y * stride, odd_src + y * stride, out, pairs);
      for (int64_t j = pairs; j < even.count; ++j) out[2 * j] = even_src[y * stride + j];
      for (int64_t j = pairs; j < odd.count; ++j) out[2 * j + 1] = odd_src[y * stride + j];
    }
    return;
  }
  for (int64_t r = 0; r < sw; ++r) {
    const PhaseSource ps = phase_source(r, sw, before, width, wq);
    for (int64_t y = 0; y < height; ++y) {
      const float* in = src + (r * height + y) * stride + ps.head;
      float* out = dx + y * width + ps.first;
      for (int64_t j = 0; j < ps.count; ++j) out[j * sw] = in[j];
    }
  }
}

}  // namespace

PhaseSums zeroed_phases(const Windows& w) {
  const int64_t sw = w.stride[2], height = w.in[1];
  const int64_t stride = (phase_width(w) + 15) / 16 * 16;  // 64-byte rows
  static thread_local std::vector<float> buffer;  // keeps its largest size: no steady-state allocation
  buffer.resize(static_cast<size_t>(stride * sw * height + 16));
  float* out = buffer.data() + (16 - reinterpret_cast<uintptr_t>(buffer.data()) / sizeof(float) % 16) % 16;
  std::fill(out, out + stride * sw * height, 0.f);
  return {stride, height, out};
}

void merge_phases(const Windows& w, const PhaseSums& ph, float* dx) {
  merge_padded(ph.data, w.in[1], w.in[2], w.pad_begin[2], phase_width(w), ph.row_stride, w.stride[2], dx);
}

int64_t phase_width(const Windows& w) {
  const int64_t sw = w.stride[2];
  const int64_t reach = (w.out[2] - 1) * sw + (w.kernel[2] - 1) * w.dilation[2] + 1;
  return (std::max(reach, w.pad_begin[2] + w.in[2]) + sw - 1) / sw;
}

Phases split_plane(const Windows& w, const float* x, float pad) {
  const int64_t sw = w.stride[2], before = w.pad_begin[2], height = w.in[1], width = w.in[2];
  const int64_t wq = phase_width(w);
  if (before == 0 && wq * sw == width && sw == 1) return {wq, height, x};
  const int64_t stride = (wq + 15) / 16 * 16;  // 64-byte rows
  // Phases and room to start on a 64-byte boundary. Keeps its largest size: no steady-state
  // allocation.
  static thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(stride * sw * height + 16));
  float* out = buffer.data() + (16 - reinterpret_cast<uintptr_t>(buffer.data()) / sizeof(float) % 16) % 16;
  if (before == 0 && wq * sw == width) {
    split_whole(x, height * width, sw, out);  // one long row: phase rows wq apart
    return {wq, height, out};
  }
  split_padded(x, height, width, before, wq, stride, sw, pad, out);
  return {stride, height, out};
}

std::span<const KernelTap> kernel_taps(const Windows& w, const Phases& ph) {
  static thread_local std::vector<KernelTap> taps;  // keeps its largest size: no steady-state allocation
  taps.clear();
  const int64_t sw = w.stride[2], dw = w.dilation[2];
  for (int64_t ky = 0; ky < w.kernel[1]; ++ky) {
    const int64_t dy = ky * w.dilation[1];
    // Tap kx reads phase r = kx * dw % sw from element q = kx * dw / sw on.
    for (int64_t kx = 0, r = 0, q = 0; kx < w.kernel[2]; ++kx) {
      taps.push_back({(r * ph.height + dy) * ph.row_stride + q, dy * w.in[2] + kx * dw - w.pad_begin[2]});
      for (r += dw; r >= sw; r -= sw) ++q;
    }
  }
  return taps;
}

int64_t rows_like(const Windows& w, int64_t oy) {
  const TapRange rows = w.taps_of[1][oy];
  int64_t end = oy + 1;
  while (end < w.out[1] && w.taps_of[1][end].lo == rows.lo && w.taps_of[1][end].hi == rows.hi) ++end;
  return end;
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
