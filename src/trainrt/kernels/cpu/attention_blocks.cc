#include "trainrt/kernels/cpu/attention_blocks.h"

#include <cmath>
#include <limits>

#include "trainrt/core/error.h"
#include "trainrt/core/simd.h"
#include "trainrt/kernels/cpu/counter_rng.h"
#include "trainrt/kernels/cpu/gemm.h"

namespace trainrt {
namespace {

template <typename C>
void keep_mask_row(C* s, const bool* m, int64_t stride, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (!m[j * stride]) s[j] = -std::numeric_limits<C>::infinity();
}

// s[j] += m[j * stride] over a row (stride 0: one value for the whole row).
TRAINRT_SIMD_CLONES void add_mask_row(float* s, const float* m, int64_t stride, int64_t n) {
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j) s[j] += m[j];
  } else {
    for (int64_t j = 0; j < n; ++j) s[j] += m[j * stride];
  }
}
void add_mask_row(double* s, const double* m, int64_t stride, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] += m[j * stride];
}
void add_mask_row(float* s, const BFloat16* m, int64_t stride, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] += bf16_to_f32(m[j * stride].bits);
}

// Adds (or applies, for bool) one row of the mask to a row of scores.
void mask_row(const Attention& a, float* s, int64_t offset, int64_t stride, int64_t n) {
  if (a.mask_dtype == DType::kBool) keep_mask_row(s, static_cast<const bool*>(a.mask) + offset, stride, n);
  else if (a.mask_dtype == DType::kBF16) add_mask_row(s, static_cast<const BFloat16*>(a.mask) + offset, stride, n);
  else add_mask_row(s, static_cast<const float*>(a.mask) + offset, stride, n);
}
void mask_row(const Attention& a, double* s, int64_t offset, int64_t stride, int64_t n) {
  if (a.mask_dtype == DType::kBool) keep_mask_row(s, static_cast<const bool*>(a.mask) + offset, stride, n);
  else add_mask_row(s, static_cast<const double*>(a.mask) + offset, stride, n);
}

TRAINRT_SIMD_CLONES void apply_keep(float* p, const bool* keep, float scale, int64_t n) {
  for (int64_t j = 0; j < n; ++j) p[j] = keep[j] ? p[j] * scale : 0.f;
}
void apply_keep(double* p, const bool* keep, double scale, int64_t n) {
  for (int64_t j = 0; j < n; ++j) p[j] = keep[j] ? p[j] * scale : 0.0;
}

template <typename C>
void scores(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
            const C* q, const C* k, C* s) {
  const int64_t e = a.head_dim;
  block_gemm(false, true, rows, cols, e, static_cast<C>(a.scale), q, e, k, e, C(0), s, cols);
  if (a.mask) {
    const int64_t* st = a.mask_stride;
    const int64_t head_offset = b * st[0] + h * st[1] + j0 * st[3];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t offset = head_offset + (i0 + r) * st[2];
      mask_row(a, s + r * cols, offset, st[3], cols);
    }
  }
  if (a.causal) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = std::max<int64_t>(0, i0 + r + 1 - j0); j < cols; ++j)
        s[r * cols + j] = -std::numeric_limits<C>::infinity();
  }
}

template <typename C>
void dropout(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, C* p) {
  const C scale = a.dropout_p < 1 ? static_cast<C>(1 / (1 - a.dropout_p)) : C(0);
  bool keep[kColBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += kColBlock) {
      const int64_t n = std::min(kColBlock, cols - c0);
      const int64_t first = ((b * a.heads + h) * a.q_len + i0 + r) * a.kv_len + j0 + c0;
      draw_keep(a.dropout_key, first, first + n, a.keep_threshold, keep);
      apply_keep(p + r * cols + c0, keep, scale, n);
    }
  }
}

}  // namespace

AttentionAttrs attention_attrs(const Node& node) {
  AttentionAttrs attrs;
  attrs.causal = node.attr_int("is_causal", 0) != 0;
  attrs.has_scale = node.has_attr("scale");
  attrs.scale = node.attr_float("scale", 0.f);
  attrs.dropout_p = node.attr_float("dropout_p", 0.f);
  attrs.has_seed = node.has_attr("seed");
  attrs.seed = static_cast<uint64_t>(node.attr_int("seed", 0));
  if (!(attrs.dropout_p >= 0 && attrs.dropout_p <= 1))
    throw InvalidModel(fmt(node.describe(), ": dropout_p ", attrs.dropout_p, " is outside [0, 1]"));
  return attrs;
}

Attention describe_attention(const std::string& where, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* mask, const AttentionAttrs& attrs, uint64_t seed) {
  const auto fail = [&](const std::string& what) {
    throw ShapeError(fmt(where, ": ", what, " (Q ", describe(q), ", K ", describe(k), ", V ", describe(v), ")"));
  };
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    fail("Q, K and V must be (B, H, L, E), (B, Hkv, S, E) and (B, Hkv, S, Ev)");
  Attention a;
  a.batch = q.dims()[0];
  a.heads = q.dims()[1];
  a.q_len = q.dims()[2];
  a.head_dim = q.dims()[3];
  a.kv_heads = k.dims()[1];
  a.kv_len = k.dims()[2];
  a.value_dim = v.dims()[3];
  if (k.dims()[0] != a.batch || v.dims()[0] != a.batch) fail("batch dims differ");
  if (v.dims()[1] != a.kv_heads || v.dims()[2] != a.kv_len) fail("K and V differ in heads or sequence length");
  if (k.dims()[3] != a.head_dim) fail("Q and K differ in head size");
  if (a.kv_heads == 0 ? a.heads != 0 : a.heads % a.kv_heads != 0)
    fail("Q's heads are not a multiple of K's and V's");
  if (a.kv_heads == 0) a.kv_heads = 1;  // no heads at all: nothing to compute, no division by 0
  a.scale = attrs.has_scale ? attrs.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(a.head_dim, 1)));
  a.causal = attrs.causal;
  a.dropout_p = attrs.dropout_p;
  if (a.dropout_p > 0) {
    a.dropout_key = stream_key(attrs.has_seed ? attrs.seed : seed);
    a.keep_threshold = keep_threshold(a.dropout_p);
  }
  if (!mask) return a;
  const DType mt = mask->dtype(), qt = q.dtype();
  if (mt != DType::kBool && mt != qt && !(qt == DType::kBF16 && mt == DType::kF32))
    throw InvalidModel(fmt(where, ": mask ", describe(*mask), " must be bool or of Q's dtype ", dtype_name(qt),
                           qt == DType::kBF16 ? " or f32" : ""));
  const std::vector<int64_t>& md = mask->dims();
  const int64_t full[4] = {a.batch, a.heads, a.q_len, a.kv_len};
  if (md.size() > 4) fail(fmt("mask ", describe(*mask), " does not broadcast to (B, H, L, S)"));
  int64_t stride = 1;
  for (size_t i = md.size(); i-- > 0;) {
    const size_t axis = 4 - md.size() + i;
    if (md[i] != 1 && md[i] != full[axis])
      fail(fmt("mask ", describe(*mask), " does not broadcast to (B, H, L, S) = ", to_string(std::vector<int64_t>(full, full + 4))));
    a.mask_stride[axis] = md[i] == 1 ? 0 : stride;
    stride *= md[i];
  }
  a.mask = mask->raw();
  a.mask_dtype = mt;
  return a;
}

void block_scores(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  const float* q, const float* k, float* s) {
  scores(a, b, h, i0, rows, j0, cols, q, k, s);
}
void block_scores(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  const double* q, const double* k, double* s) {
  scores(a, b, h, i0, rows, j0, cols, q, k, s);
}

void block_dropout(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                   float* p) {
  dropout(a, b, h, i0, rows, j0, cols, p);
}
void block_dropout(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                   double* p) {
  dropout(a, b, h, i0, rows, j0, cols, p);
}

void block_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Called from inside the kernels' ThreadPool loops, so gemm_f32 runs on this thread alone.
  gemm_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void block_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += (trans_a ? a[p * lda + i] : a[i * lda + p]) * (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * sum + (beta == 0 ? 0.0 : beta * c[i * ldc + j]);
    }
  }
}

}  // namespace trainrt
