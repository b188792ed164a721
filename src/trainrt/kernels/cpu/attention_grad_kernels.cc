// CPU kernel of ScaledDotProductAttentionGrad (schema: ops/attention_schemas.cc):
//   (dO, Q, K, V, O, logsumexp, [mask], [seed], [dlogsumexp]) -> (dQ, dK, dV, [dS])
// FlashAttention-2's backward (Dao 2023, Algorithm 2): the probabilities are recomputed one
// (rows, cols) block at a time from Q, K and the forward's logsumexp, never stored whole.
// With Z the dropout's keep / (1 - p) (1 without dropout) and D[i] = dO[i] . O[i]:
//   P  = exp(S - logsumexp)                  S: the block's scores (attention_blocks.h)
//   dV[j] += (P * Z)^T dO                    dP = (dO V^T) * Z
//   dS = P * (dP - D + dlogsumexp)           (softmax backward: D[i] = sum_j P[i][j] dP[i][j];
//                                             d logsumexp[i] / d S[i][j] = P[i][j])
//   dQ[i] += scale * dS K                    dK[j] += scale * dS^T Q
// D = rowsum(dO * O) holds with dropout too, since O = (P * Z) V. When the node has output 3, each
// block's dS is also stored into it (B, H, L, S): the gradient of the scores and so of a float
// mask; blocks that causal attention skips stay 0.
//
// One task per (batch, key/value head): it owns that head's dK and dV and the dQ of the query
// heads reading it (H / Hkv of them with grouped-query attention), so tasks never write the same
// memory. Rows whose logsumexp is +inf (all masked) get P = 0 and so zero gradients.
#include <cmath>

#include "trainrt/kernels/cpu/attention_blocks.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// The tensors of one run, as plain pointers into contiguous (B, H, ...) data.
template <typename C>
struct GradData {
  const C *d_o, *q, *k, *v, *o, *lse;
  const C* d_lse;  // null when no gradient flows into logsumexp
  C *dq, *dk, *dv;
  C* ds;  // (B, H, L, S); null when the node does not want dS
};

// dS, dQ and dK of one (rows, cols) block of query head (b, h); s holds P on entry.
template <typename C>
void block_grad(const Attention& a, const GradData<C>& t, int64_t head, int64_t kv_head, int64_t i0, int64_t rows,
                int64_t j0, int64_t cols, const C* d, C* s, C* dp) {
  const int64_t b = head / a.heads, h = head % a.heads;
  const int64_t e = a.head_dim, ev = a.value_dim;
  const C scale = static_cast<C>(a.scale);
  const C* q = t.q + (head * a.q_len + i0) * e;
  const C* d_o = t.d_o + (head * a.q_len + i0) * ev;
  const C* k = t.k + (kv_head * a.kv_len + j0) * e;
  const C* v = t.v + (kv_head * a.kv_len + j0) * ev;
  block_scores(a, b, h, i0, rows, j0, cols, q, k, s);
  for (int64_t r = 0; r < rows; ++r) exp_shift_sum(s + r * cols, s + r * cols, t.lse[head * a.q_len + i0 + r], cols);
  // dV[j] += (P * Z)^T dO
  const C* p_dropped = s;
  if (a.dropout_p > 0) {
    std::copy(s, s + rows * cols, dp);
    block_dropout(a, b, h, i0, rows, j0, cols, dp);
    p_dropped = dp;
  }
  block_gemm(true, false, cols, ev, rows, C(1), p_dropped, cols, d_o, ev, C(1), t.dv + (kv_head * a.kv_len + j0) * ev,
             ev);
  // dP = (dO V^T) * Z, then dS = P * (dP - D) in place of P.
  block_gemm(false, true, rows, cols, ev, C(1), d_o, ev, v, ev, C(0), dp, cols);
  if (a.dropout_p > 0) block_dropout(a, b, h, i0, rows, j0, cols, dp);
  for (int64_t r = 0; r < rows; ++r) {
    C* sr = s + r * cols;
    const C* dpr = dp + r * cols;
    const C dr = d[i0 + r];
    for (int64_t j = 0; j < cols; ++j) sr[j] *= dpr[j] - dr;
    if (t.ds) std::copy(sr, sr + cols, t.ds + (head * a.q_len + i0 + r) * a.kv_len + j0);
  }
  block_gemm(false, false, rows, e, cols, scale, s, cols, k, e, C(1), t.dq + (head * a.q_len + i0) * e, e);
  block_gemm(true, false, cols, e, rows, scale, s, cols, q, e, C(1), t.dk + (kv_head * a.kv_len + j0) * e, e);
}

// Every gradient flowing through key/value head kv_head (b * Hkv + hkv).
template <typename C>
void grad_kv_head(const Attention& a, const GradData<C>& t, int64_t kv_head) {
  const int64_t e = a.head_dim, ev = a.value_dim, g = a.group();
  const int64_t b = kv_head / a.kv_heads, first_head = b * a.heads + (kv_head % a.kv_heads) * g;
  std::fill(t.dk + kv_head * a.kv_len * e, t.dk + (kv_head + 1) * a.kv_len * e, C(0));
  std::fill(t.dv + kv_head * a.kv_len * ev, t.dv + (kv_head + 1) * a.kv_len * ev, C(0));
  std::fill(t.dq + first_head * a.q_len * e, t.dq + (first_head + g) * a.q_len * e, C(0));
  if (t.ds) std::fill(t.ds + first_head * a.q_len * a.kv_len, t.ds + (first_head + g) * a.q_len * a.kv_len, C(0));
  C* s = scratch<C>(0, kRowBlock * kColBlock);
  C* dp = scratch<C>(1, kRowBlock * kColBlock);
  C* d = scratch<C>(2, g * a.q_len);  // D - dlogsumexp of each row of the group's heads
  for (int64_t i = 0; i < g * a.q_len; ++i) {
    const C* o = t.o + (first_head * a.q_len + i) * ev;
    const C* d_o = t.d_o + (first_head * a.q_len + i) * ev;
    C sum = 0;
    for (int64_t c = 0; c < ev; ++c) sum += o[c] * d_o[c];
    d[i] = t.d_lse ? sum - t.d_lse[first_head * a.q_len + i] : sum;
  }
  for (int64_t j0 = 0; j0 < a.kv_len; j0 += kColBlock) {
    const int64_t cols = std::min(kColBlock, a.kv_len - j0);
    // Causal: rows before j0 see none of these columns.
    const int64_t first_row = a.causal ? j0 / kRowBlock * kRowBlock : 0;
    for (int64_t x = 0; x < g; ++x) {
      for (int64_t i0 = first_row; i0 < a.q_len; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, a.q_len - i0);
        block_grad(a, t, first_head + x, kv_head, i0, rows, j0, cols, d + x * a.q_len, s, dp);
      }
    }
  }
}

template <typename C>
KernelFn make_attention_grad(const Node& node) {
  const AttentionAttrs attrs = attention_attrs(node);
  return [attrs, where = node.describe()](KernelContext& ctx) {
    const Tensor* mask = ctx.has_in(6) ? &ctx.in(6) : nullptr;
    const uint64_t seed = ctx.has_in(7) ? static_cast<uint64_t>(ctx.in(7).data<int64_t>()[0]) : 0;
    const Attention a = describe_attention(where, ctx.in(1), ctx.in(2), ctx.in(3), mask, attrs, seed);
    // Outputs the node does not want are computed into temporaries: dQ, dK and dV come together.
    std::vector<C> unwanted[3];
    C* grads[3];
    for (int i = 0; i < 3; ++i) {
      if (ctx.has_out(i)) {
        grads[i] = ctx.out(i).data<C>();
      } else {
        unwanted[i].resize(static_cast<size_t>(ctx.in(i + 1).numel()));
        grads[i] = unwanted[i].data();
      }
    }
    const GradData<C> t{ctx.in(0).data<C>(), ctx.in(1).data<C>(), ctx.in(2).data<C>(), ctx.in(3).data<C>(),
                        ctx.in(4).data<C>(), ctx.in(5).data<C>(), ctx.has_in(8) ? ctx.in(8).data<C>() : nullptr,
                        grads[0], grads[1], grads[2], ctx.has_out(3) ? ctx.out(3).data<C>() : nullptr};
    ctx.threads().parallel_for(a.batch * a.kv_heads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t kv_head = begin; kv_head < end; ++kv_head) grad_kv_head(a, t, kv_head);
    });
  };
}

}  // namespace

void register_attention_grad_kernels(KernelTable& t) {
  const std::string_view domain = kTrainrtDomain;
  t.add(domain, "ScaledDotProductAttentionGrad", DType::kF32, make_attention_grad<float>);
  t.add(domain, "ScaledDotProductAttentionGrad", DType::kF64, make_attention_grad<double>);
}

}  // namespace trainrt
