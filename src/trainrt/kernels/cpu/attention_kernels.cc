// CPU kernel of ScaledDotProductAttention (schema: ops/attention_schemas.cc): the forward of
// torch.nn.functional.scaled_dot_product_attention without the (L, S) matrix.
//
// Each task takes one block of kRowBlock query rows of one head and walks the key/value columns
// kColBlock at a time with the online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao
// 2023, Algorithm 1). Per row i, with m the running max and l the running sum:
//   S = scores of the block (attention_blocks.h)                      (rows, cols)
//   m' = max(m, max_j S[i][j]);  P[i][j] = exp(S[i][j] - m')
//   l  = l * exp(m - m') + sum_j P[i][j];  O[i] = O[i] * exp(m - m') + (dropout(P) V)[i]
// and at the end O[i] /= l, logsumexp[i] = m + log l. The normalizer l sums the probabilities
// before dropout (torch drops the softmax's output). O accumulates in the output itself.
//
// Rows whose every score is masked (-inf) have l = 0: like torch's CPU kernel
// (_scaled_dot_product_flash_attention_for_cpu) their output is 0, and so are their gradients;
// their logsumexp is +inf, so the gradient's recomputed probabilities exp(S - logsumexp) are 0.
// Causal blocks entirely above the diagonal are skipped. bf16 Q, K, V compute in f32 (logsumexp
// stays f32: rounded to bf16 it would shift the gradient's probabilities by up to 3%).
#include <cmath>
#include <limits>

#include "trainrt/kernels/cpu/attention_blocks.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Rows [i0, i0 + rows) of head (b, h): the online softmax over every visible column block.
template <typename C>
void attend_rows(const Attention& a, int64_t b, int64_t h, int64_t i0, int64_t rows, const C* q, const C* k,
                 const C* v, C* o, C* lse) {
  const int64_t e = a.head_dim, ev = a.value_dim;
  constexpr C kInf = std::numeric_limits<C>::infinity();
  C* s = scratch<C>(0, kRowBlock * kColBlock);  // (rows, cols) scores, then probabilities
  C* m = scratch<C>(1, kRowBlock);
  C* l = scratch<C>(2, kRowBlock);
  std::fill(m, m + rows, -kInf);
  std::fill(l, l + rows, C(0));
  std::fill(o, o + rows * ev, C(0));
  const int64_t visible = a.visible_cols(i0 + rows);
  for (int64_t j0 = 0; j0 < visible; j0 += kColBlock) {
    const int64_t cols = std::min(kColBlock, visible - j0);
    block_scores(a, b, h, i0, rows, j0, cols, q, k + j0 * e, s);
    for (int64_t r = 0; r < rows; ++r) {
      C* sr = s + r * cols;
      const C m_new = std::max(m[r], row_max(sr, cols));
      if (m_new == -kInf) {  // everything so far is masked: the row's probabilities are 0
        std::fill(sr, sr + cols, C(0));
        continue;
      }
      const C rescale = std::exp(m[r] - m_new);  // 0 when m was -inf
      l[r] = l[r] * rescale + exp_shift_sum(sr, sr, m_new, cols);
      if (rescale != C(1)) scale(o + r * ev, o + r * ev, rescale, ev);
      m[r] = m_new;
    }
    if (a.dropout_p > 0) block_dropout(a, b, h, i0, rows, j0, cols, s);
    block_gemm(false, false, rows, ev, cols, C(1), s, cols, v + j0 * ev, ev, C(1), o, ev);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] == C(0)) {
      std::fill(o + r * ev, o + (r + 1) * ev, C(0));
      lse[r] = kInf;
    } else {
      scale(o + r * ev, o + r * ev, C(1) / l[r], ev);
      lse[r] = m[r] + std::log(l[r]);
    }
  }
}

// T: the tensors' dtype; C = compute_t<T> (bf16 tasks load their head's rows widened, attention_blocks.h).
template <typename T>
KernelFn make_attention(const Node& node) {
  using C = compute_t<T>;
  const AttentionAttrs attrs = attention_attrs(node);
  return [attrs, where = node.describe()](KernelContext& ctx) {
    const Tensor& q = ctx.in(0);
    const Tensor* mask = ctx.has_in(3) ? &ctx.in(3) : nullptr;
    const Attention a = describe_attention(where, q, ctx.in(1), ctx.in(2), mask, attrs, ctx.random_seed);
    if (ctx.has_out(2)) ctx.out(2).data<int64_t>()[0] = static_cast<int64_t>(attrs.has_seed ? attrs.seed : ctx.random_seed);
    std::vector<C> lse_storage;  // the rows' logsumexp is computed even when the node does not output it
    if (!ctx.has_out(1)) lse_storage.resize(static_cast<size_t>(a.batch * a.heads * a.q_len));
    C* lse = ctx.has_out(1) ? ctx.out(1).data<C>() : lse_storage.data();
    const T* qd = q.data<T>();
    const T* kd = ctx.in(1).data<T>();
    const T* vd = ctx.in(2).data<T>();
    T* od = ctx.out(0).data<T>();
    const int64_t e = a.head_dim, ev = a.value_dim;
    const int64_t row_blocks = (a.q_len + kRowBlock - 1) / kRowBlock;
    ctx.threads().parallel_for(a.batch * a.heads * row_blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t head = task / row_blocks;  // b * H + h
        const int64_t b = head / a.heads, h = head % a.heads;
        const int64_t kv_head = b * a.kv_heads + h / a.group();
        const int64_t i0 = (task % row_blocks) * kRowBlock;
        const int64_t rows = std::min(kRowBlock, a.q_len - i0);
        const int64_t visible = a.visible_cols(i0 + rows);
        // bf16: Q's rows (rows, E), the visible K (visible, E) and V (visible, Ev), O (rows, Ev).
        C* buf = kIsFloat16<T> ? scratch<C>(3, (rows + visible) * (e + ev)) : nullptr;
        const C* qc = load(qd + (head * a.q_len + i0) * e, rows * e, buf);
        const C* kc = load(kd + kv_head * a.kv_len * e, visible * e, buf);
        const C* vc = load(vd + kv_head * a.kv_len * ev, visible * ev, buf);
        T* o = od + (head * a.q_len + i0) * ev;
        C* oc = accumulator(o, rows * ev, buf);
        attend_rows(a, b, h, i0, rows, qc, kc, vc, oc, lse + head * a.q_len + i0);
        store(oc, o, rows * ev);
      }
    });
  };
}

}  // namespace

void register_attention_kernels(KernelTable& t) {
  const std::string_view domain = kTrainrtDomain;
  t.add(domain, "ScaledDotProductAttention", DType::kF32, make_attention<float>);
  t.add(domain, "ScaledDotProductAttention", DType::kF64, make_attention<double>);
  t.add(domain, "ScaledDotProductAttention", DType::kBF16, make_attention<BFloat16>);
  register_attention_grad_kernels(t);
}

}  // namespace trainrt
