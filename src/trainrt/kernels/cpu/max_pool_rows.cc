#include "trainrt/kernels/cpu/max_pool_rows.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "trainrt/core/simd.h"

namespace trainrt {
namespace {

// The plane is first copied into a "phase" layout so that every pass below is a contiguous,
// stride-1 loop over the output columns: input row y, padded by pad_begin on the left and -inf to
// the right, is split into its sw phases (phase r holds the padded columns r, r + sw, r + 2 sw,
// ...), each wq long. Tap kx of output column ox reads padded column ox * sw + kx * dw, which is
// element ox + kx * dw / sw of phase kx * dw % sw. (Strided loads straight from the plane are
// peeled by GCC into scalar code on rows shorter than 17 windows, the common case.)

// The padded row: pad_begin values, the w values of src, then `after` values; the padding is -inf
// (any value would do: border columns are recomputed from the plane).
void pad_row(const float* src, int64_t w, int64_t before, int64_t after, float* dst) {
  std::fill(dst, dst + before, -std::numeric_limits<float>::infinity());
  std::copy(src, src + w, dst + before);
  std::fill(dst + before + w, dst + before + w + after, -std::numeric_limits<float>::infinity());
}

// even[j] = src[2 j], odd[j] = src[2 j + 1] for j < n (a full group of two loads: no peeling).
TRAINRT_SIMD_CLONES void deinterleave(const float* src, float* even, float* odd, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    even[j] = src[2 * j];
    odd[j] = src[2 * j + 1];
  }
}

// Over n windows of an output row, from the tap of window i at src[i] (plane offset base + i * s):
//   first_tap    best = the tap, at = its offset
//   fold_max     best = the tap where it beats best
//   fold_argmax  best, at = the tap and its offset where it beats best
TRAINRT_SIMD_CLONES void first_tap(const float* src, int32_t base, int32_t s, float* __restrict best,
                                   int32_t* __restrict at, int64_t n) {
  for (int64_t i = 0; i < n; ++i) best[i] = src[i];
  if (at)
    for (int64_t i = 0; i < n; ++i) at[i] = base + static_cast<int32_t>(i) * s;
}
TRAINRT_SIMD_CLONES void fold_max(const float* src, float* __restrict best, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = src[i], b = best[i];
    best[i] = beats(v, b) ? v : b;
  }
}
TRAINRT_SIMD_CLONES void fold_argmax(const float* src, int32_t base, int32_t s, float* __restrict best,
                                     int32_t* __restrict at, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = src[i], b = best[i];
    const bool take = beats(v, b);
    best[i] = take ? v : b;
    at[i] = take ? base + static_cast<int32_t>(i) * s : at[i];
  }
}

// The phase layout of a plane (see above): rows of wq elements, row (y * sw + r) holding phase r
// of input row y.
struct Phases {
  int64_t wq = 0;
  const float* data = nullptr;
};

Phases split_plane(const Windows& w, const float* x) {
  const int64_t sw = w.stride[2], before = w.pad_begin[2];
  // The padded row must reach the last tap of the last window.
  const int64_t reach = (w.out[2] - 1) * sw + (w.kernel[2] - 1) * w.dilation[2] + 1;
  const int64_t wq = (std::max(reach, before + w.in[2]) + sw - 1) / sw, padded = wq * sw;
  static thread_local std::vector<float> buffer;  // keeps its largest size: no steady-state allocation
  buffer.resize(static_cast<size_t>(std::max<int64_t>(padded * (w.in[1] + 1), 0)));
  float* out = buffer.data();
  float* row = out + padded * w.in[1];  // (padded) staging row, for sw > 1
  for (int64_t y = 0; y < w.in[1]; ++y) {
    float* dst = out + y * padded;
    if (sw == 1) {
      pad_row(x + y * w.in[2], w.in[2], before, padded - before - w.in[2], dst);
      continue;
    }
    pad_row(x + y * w.in[2], w.in[2], before, padded - before - w.in[2], row);
    if (sw == 2) {
      deinterleave(row, dst, dst + wq, wq);
    } else {
      for (int64_t r = 0; r < sw; ++r)
        for (int64_t j = 0; j < wq; ++j) dst[r * wq + j] = row[j * sw + r];
    }
  }
  return {wq, out};
}

// [lo, hi): the output columns whose taps along W all lie in the input (contiguous: window
// starts grow with the column).
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

}  // namespace

bool max_pool_rows_apply(const Windows& w) {
  // Offsets, the padded rows' included, must fit in int32.
  const int64_t padded_row = w.pad_begin[2] + w.in[2] + w.pad_end[2] + w.kernel[2] * w.dilation[2] + w.stride[2];
  return w.in[0] == 1 && w.kernel[0] == 1 && w.out[0] == 1 &&
         w.in[1] * padded_row <= std::numeric_limits<int32_t>::max();
}

void max_pool_plane_rows(const Windows& w, const float* x, float* y, int32_t* argmax) {
  const int64_t width = w.in[2], out_w = w.out[2], kw = w.kernel[2], sw = w.stride[2], dw = w.dilation[2];
  const TapRange inner = interior_columns(w);
  const Phases phases = split_plane(w, x);
  for (int64_t oy = 0; oy < w.out[1]; ++oy) {
    float* best = y + oy * out_w;  // (out_w)
    int32_t* at = argmax ? argmax + oy * out_w : nullptr;
    const TapRange rows = w.taps_of[1][oy];
    const int64_t sy = w.start_of[1][oy];
    // All columns, one vectorized pass per tap; the border ones are redone below.
    if (inner.lo < inner.hi && rows.lo < rows.hi) {
      for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
        const int64_t in_y = sy + ky * w.dilation[1];
        for (int64_t kx = 0; kx < kw; ++kx) {
          const float* src = phases.data + (in_y * sw + kx * dw % sw) * phases.wq + kx * dw / sw;
          const auto base = static_cast<int32_t>(in_y * width + kx * dw - w.pad_begin[2]);
          const auto s = static_cast<int32_t>(sw);
          if (ky == rows.lo && kx == 0) first_tap(src, base, s, best, at, out_w);
          else if (at) fold_argmax(src, base, s, best, at, out_w);
          else fold_max(src, best, out_w);
        }
      }
    }
    // Border columns (and every column of a row wholly in padding): tap by tap from the plane.
    for (int64_t ox = 0; ox < out_w; ++ox) {
      if (ox == inner.lo && rows.lo < rows.hi) ox = inner.hi;
      if (ox >= out_w) break;
      const TapRange cols = w.taps_of[2][ox];
      int32_t best_at = -1;
      float best_value = std::numeric_limits<float>::lowest();
      for (int64_t ky = rows.lo; ky < rows.hi; ++ky)
        for (int64_t kx = cols.lo; kx < cols.hi; ++kx) {
          const int64_t p = (sy + ky * w.dilation[1]) * width + w.start_of[2][ox] + kx * dw;
          if (best_at < 0 || beats(x[p], best_value)) best_at = static_cast<int32_t>(p), best_value = x[p];
        }
      best[ox] = best_value;
      if (at) at[ox] = best_at;
    }
  }
}

}  // namespace trainrt
