// TrainRT's one entry point for f32 and bf16 matrix products: every kernel that multiplies matrices
// uses it.
//
// C = alpha * op(A) * op(B) + beta * C on row-major matrices, op(X) = X or X^T, BLAS conventions:
// A is stored (m, k) with leading dimension lda, or (k, m) when trans_a; B is stored (k, n), or
// (n, k) when trans_b; C is (m, n). When beta == 0, C is only written (NaNs in it do not
// propagate). The library doing the work (oneDNN, chosen by measurement: docs/gemm.md) stays
// behind this header; its primitives are created once per problem shape, cached, and safe to run
// from several threads at once. Large products are split into pieces run on ThreadPool::global()
// (one thread per piece; oneDNN's own OpenMP threads stay unused): column or row blocks of C, or
// whole, as op tuning chose for the problem (op_tuning.h) or else 64-column blocks. Called from
// inside a ThreadPool loop, a product runs on the calling thread alone.
//
//   // Linear layer forward: Y(256, 2048) = X(256, 784) W(2048, 784)^T
//   gemm_f32(false, true, 256, 2048, 784, 1.f, x, 784, w, 784, 0.f, y, 2048);
//   // Attention scores for 32 heads: S_i(128, 128) = Q_i(128, 64) K_i(128, 64)^T
//   gemm_f32_batched(32, false, true, 128, 128, 64, 1.f, q, 64, 128 * 64, k, 64, 128 * 64,
//                    0.f, s, 128, 128 * 128);
//
// gemm_bf16 is the same product on bf16 A, B and C (mixed precision training: torch.autocast's
// matmuls), summed in f32 and rounded to bf16 once per element of C; beta * C reads C's bf16 values.
// gemm_bf16_f32 takes bf16 A and B and writes (and with beta, reads) an f32 C, unrounded: a bf16
// head's scores before its softmax, a weight gradient summed over row blocks.
#pragma once

#include <cstdint>
#include <type_traits>

#include "trainrt/core/dtype.h"

namespace trainrt {

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

// `batch` independent products, matrix i at a + i * stride_a, b + i * stride_b, c + i * stride_c.
// A stride of 0 for A or B reuses one matrix for every product (a broadcast batch dim).
void gemm_f32_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                      int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                      int64_t stride_c);

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c,
               int64_t ldc);

void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                   int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

void gemm_bf16_f32_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const BFloat16* a, int64_t lda, int64_t stride_a, const BFloat16* b, int64_t ldb,
                           int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c);

void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const BFloat16* a, int64_t lda, int64_t stride_a, const BFloat16* b,
                       int64_t ldb, int64_t stride_b, float beta, BFloat16* c, int64_t ldc,
                       int64_t stride_c);

// gemm_f32_batched, gemm_bf16_batched or gemm_bf16_f32_batched by operand type T (float or BFloat16) and
// result type C (T, or float for bf16 operands), for kernels written once for all three.
template <typename T, typename C = T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, float beta,
                  C* c, int64_t ldc, int64_t stride_c) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, BFloat16>);
  static_assert(std::is_same_v<C, T> || std::is_same_v<C, float>);
  if constexpr (std::is_same_v<T, float>)
    gemm_f32_batched(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                     stride_c);
  else if constexpr (std::is_same_v<C, float>)
    gemm_bf16_f32_batched(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                          stride_c);
  else
    gemm_bf16_batched(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                      stride_c);
}

}  // namespace trainrt
