// The pieces the attention forward and backward kernels share: the problem's geometry read from
// concrete tensors, and one (rows, cols) block of the attention matrix at a time.
//
// Neither kernel holds more of the (L, S) score matrix of a head than one block of kRowBlock x
// kColBlock: scores are recomputed from Q and K where they are needed (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2). A block's scores are
//   S[i][j] = scale * (Q_i . K_j) + mask[i][j]       (float mask), or
//   S[i][j] = -inf where a bool mask is false or, when causal, where j > i (torch's top-left tril).
// Q, K and V are f32, f64 or bf16; bf16 computes in f32 (compute_t): each task widens the rows of the
// heads it reads when it loads them (`load`) and rounds its results once at the end (`store`), so
// the blocks, the online softmax and the gradient's sums are the f32 code's.
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
#include "trainrt/kernels/cpu/reduce_util.h"

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
  // (0 along broadcast dims). Bool masks keep true entries; others (of Q's dtype, or f32 under
  // bf16 Q) are added.
  const void* mask = nullptr;
  DType mask_dtype = DType::kUndefined;
  int64_t mask_stride[4] = {0, 0, 0, 0};
  double dropout_p = 0;
  uint64_t dropout_key = 0;  // stream_key(seed)
  uint64_t keep_threshold = 0;

  int64_t group() const { return heads / kv_heads; }
  // Columns a row block ending (exclusive) at row i_end can see: all, or i_end when causal.
  int64_t visible_cols(int64_t i_end) const { return causal ? std::min(kv_len, i_end) : kv_len; }
};

// Checks the concrete shapes (ShapeError naming `where`, the input and its shape) and the mask's
// dtype (InvalidModel) and builds the problem. `mask` may be null; `seed` (unless attrs has one) keys the dropout when dropout_p > 0.
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

// The n elements at x in the compute type: x itself for f32 and f64; for bf16 a widened copy
// carved from the float buffer `buf`, which moves past it.
template <typename T>
const compute_t<T>* load(const T* x, int64_t n, compute_t<T>*& buf) {
  if constexpr (kIsFloat16<T>) {
    compute_t<T>* y = buf;
    convert_to_f32(x, y, n);
    buf += n;
    return y;
  } else {
    return x;
  }
}
// Where to sum results meant for the n elements at x: x itself, or (bf16) n floats of `buf`.
template <typename T>
compute_t<T>* accumulator(T* x, int64_t n, compute_t<T>*& buf) {
  if constexpr (kIsFloat16<T>) {
    compute_t<T>* y = buf;
    buf += n;
    return y;
  } else {
    return x;
  }
}
// Rounds an accumulator into x (nothing to do when it is x).
template <typename T>
void store(const compute_t<T>* acc, T* x, int64_t n) {
  if constexpr (kIsFloat16<T>) convert_from_f32(acc, x, n);
}

// Registers the gradient kernel (attention_grad_kernels.cc).
class KernelTable;
void register_attention_grad_kernels(KernelTable& t);

}  // namespace trainrt
