// The pieces the attention forward and backward kernels share: the problem's geometry read from
// concrete tensors, and one (rows, cols) block of the attention matrix at a time.
//
// Neither kernel holds more of the (L, S) score matrix of a head than one block of kRowBlock x
// kColBlock: scores are recomputed from Q and K where they are needed (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2). A block's scores are
//   S[i][j] = scale * (Q_i . K_j) + mask[i][j]       (float mask), or
//   S[i][j] = -inf where a bool mask is false or, when causal, where j > i (torch's top-left tril).
// The dropout of a probability P[i][j] of head (b, h) keeps it with the flag of element
// ((b * H + h) * L + i) * S + j of the seed's stream (counter_rng.h) and scales it by 1 / (1 - p).
//
//   const Attention a = describe_attention(node.describe(), q, k, v, mask, attrs);
//   block_scores(a, head, i0, rows, j0, cols, q_block, k_block, s);   // s: (rows, cols)
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

inline constexpr int64_t kRowBlock = 128;
inline constexpr int64_t kColBlock = 256;

// The node's attributes, read once when the kernel is made.
struct AttentionAttrs {
  bool causal = false;
  bool has_scale = false;
  double scale = 0;  // when has_scale
  double dropout_p = 0;
  bool has_seed = false;  // a fixed dropout seed (tests), like Dropout's `seed` attribute
  uint64_t seed = 0;
};
AttentionAttrs attention_attrs(const Node& node);

// One run's problem: dims, the mask as a (B, H, L, S) view, the resolved scale and dropout.
struct Attention {
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  double scale = 0;
  bool causal = false;
  // The mask: null when absent; element (b, h, i, j) at mask + b*stride[0] + ... + j*stride[3]
  // (0 along broadcast dims). Bool masks keep true entries; others are added.
  const void* mask = nullptr;
  bool bool_mask = false;
  int64_t mask_stride[4] = {0, 0, 0, 0};
  double dropout_p = 0;
  uint64_t dropout_key = 0;  // stream_key(seed)
  uint64_t keep_threshold = 0;

  int64_t group() const { return heads / kv_heads; }
  // Columns a row block ending (exclusive) at row i_end can see: all, or i_end when causal.
  int64_t visible_cols(int64_t i_end) const { return causal ? std::min(kv_len, i_end) : kv_len; }
};

// Checks the concrete shapes (ShapeError naming `where`, the input and its shape) and builds the
// problem. `mask` may be null; `seed` (unless attrs has one) keys the dropout when dropout_p > 0.
Attention describe_attention(const std::string& where, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* mask, const AttentionAttrs& attrs, uint64_t seed);

// s (rows, cols) = the scores of rows [i0, i0 + rows) and columns [j0, j0 + cols) of head
// (b, h): q points at row i0 of the head's Q (rows, E), k at row j0 of its K (cols, E).
void block_scores(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  const float* q, const float* k, float* s);
void block_scores(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  const double* q, const double* k, double* s);

// p (rows, cols) *= keep / (1 - dropout_p), the dropout flags of the same block.
void block_dropout(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                   float* p);
void block_dropout(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                   double* p);

// C = alpha * op(A) op(B) + beta * C on one thread (gemm.h conventions): oneDNN for float, a plain
// loop for double (double is the precision of gradient checks, not of training).
void block_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void block_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Registers the gradient kernel (attention_grad_kernels.cc).
class KernelTable;
void register_attention_grad_kernels(KernelTable& t);

}  // namespace trainrt
