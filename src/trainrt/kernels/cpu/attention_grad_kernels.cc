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
// memory. Rows whose logsumexp is +inf (all masked) get P = 0 and so zero gradients. With bf16
// tensors a task widens its heads once, sums dQ, dK and dV in f32 and rounds each once at the end;
// dS is rounded block by block (it is as large as the attention matrix).
#include <cmath>
#include <cstring>

#include "trainrt/kernels/cpu/attention_blocks.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Where dS rows go: output 3 (B, H, L, S), of the float mask's dtype (bf16 or f32 under bf16 Q).
struct ScoresGrad {
  void* data = nullptr;  // null when the node does not want dS
  DType dtype = DType::kUndefined;
};
void store_row(const float* x, const ScoresGrad& ds, int64_t offset, int64_t n) {
  if (ds.dtype == DType::kBF16) convert_from_f32(x, static_cast<BFloat16*>(ds.data) + offset, n);
  else std::copy(x, x + n, static_cast<float*>(ds.data) + offset);
}
void store_row(const double* x, const ScoresGrad& ds, int64_t offset, int64_t n) {
  std::copy(x, x + n, static_cast<double*>(ds.data) + offset);
}

// The tensors of one run, as plain pointers into contiguous (B, H, ...) data of dtype T.
template <typename T>
struct GradTensors {
  const T *d_o, *q, *k, *v, *o;
  const compute_t<T> *lse, *d_lse;  // d_lse null when no gradient flows into logsumexp
  T *dq, *dk, *dv;
  ScoresGrad ds;
};

// One task's tensors in the compute type C: key/value head kv_head and the g query heads reading it.
template <typename C>
struct GroupData {
  const C *q, *d_o, *o;  // (g, L, E), (g, L, Ev), (g, L, Ev)
  const C *k, *v;        // (S, E), (S, Ev)
  const C *lse, *d_lse;  // (g, L)
  C *dq, *dk, *dv;       // like q, k and v
};

// dS, dQ and dK of one (rows, cols) block of query head first_head + x; s holds P on entry.
template <typename C>
void block_grad(const Attention& a, const GroupData<C>& t, const ScoresGrad& ds, int64_t first_head, int64_t x,
                int64_t i0, int64_t rows, int64_t j0, int64_t cols, const C* d, C* s, C* dp) {
  const int64_t head = first_head + x, b = head / a.heads, h = head % a.heads;
  const int64_t e = a.head_dim, ev = a.value_dim, row0 = x * a.q_len + i0;
  const C scale = static_cast<C>(a.scale);
  const C* q = t.q + row0 * e;
  const C* d_o = t.d_o + row0 * ev;
  const C* k = t.k + j0 * e;
  const C* v = t.v + j0 * ev;
  block_scores(a, b, h, i0, rows, j0, cols, q, k, s);
  for (int64_t r = 0; r < rows; ++r) exp_shift_sum(s + r * cols, s + r * cols, t.lse[row0 + r], cols);
  // dV[j] += (P * Z)^T dO
  const C* p_dropped = s;
  if (a.dropout_p > 0) {
    std::copy(s, s + rows * cols, dp);
    block_dropout(a, b, h, i0, rows, j0, cols, dp);
    p_dropped = dp;
  }
  block_gemm(true, false, cols, ev, rows, C(1), p_dropped, cols, d_o, ev, C(1), t.dv + j0 * ev, ev);
  // dP = (dO V^T) * Z, then dS = P * (dP - D) in place of P.
  block_gemm(false, true, rows, cols, ev, C(1), d_o, ev, v, ev, C(0), dp, cols);
  if (a.dropout_p > 0) block_dropout(a, b, h, i0, rows, j0, cols, dp);
  for (int64_t r = 0; r < rows; ++r) {
    C* sr = s + r * cols;
    const C* dpr = dp + r * cols;
    const C dr = d[i0 + r];
    for (int64_t j = 0; j < cols; ++j) sr[j] *= dpr[j] - dr;
    if (ds.data) store_row(sr, ds, (head * a.q_len + i0 + r) * a.kv_len + j0, cols);
  }
  block_gemm(false, false, rows, e, cols, scale, s, cols, k, e, C(1), t.dq + row0 * e, e);
  block_gemm(true, false, cols, e, rows, scale, s, cols, q, e, C(1), t.dk + j0 * e, e);
}

// Every gradient flowing through key/value head kv_head (b * Hkv + hkv).
template <typename T>
void grad_kv_head(const Attention& a, const GradTensors<T>& x, int64_t kv_head) {
  using C = compute_t<T>;
  const int64_t e = a.head_dim, ev = a.value_dim, g = a.group(), l = a.q_len, sl = a.kv_len;
  const int64_t b = kv_head / a.kv_heads, first_head = b * a.heads + (kv_head % a.kv_heads) * g;
  // bf16: Q, dO, O, K, V widened and dQ, dK, dV summed in f32: 2 (gL + S)(E + Ev) floats.
  C* buf = kIsFloat16<T> ? scratch<C>(3, 2 * (g * l + sl) * (e + ev)) : nullptr;
  const GroupData<C> t{load(x.q + first_head * l * e, g * l * e, buf),
                       load(x.d_o + first_head * l * ev, g * l * ev, buf),
                       load(x.o + first_head * l * ev, g * l * ev, buf),
                       load(x.k + kv_head * sl * e, sl * e, buf),
                       load(x.v + kv_head * sl * ev, sl * ev, buf),
                       x.lse + first_head * l,
                       x.d_lse ? x.d_lse + first_head * l : nullptr,
                       accumulator(x.dq + first_head * l * e, g * l * e, buf),
                       accumulator(x.dk + kv_head * sl * e, sl * e, buf),
                       accumulator(x.dv + kv_head * sl * ev, sl * ev, buf)};
  std::fill(t.dq, t.dq + g * l * e, C(0));
  std::fill(t.dk, t.dk + sl * e, C(0));
  std::fill(t.dv, t.dv + sl * ev, C(0));
  if (x.ds.data) {
    const size_t size = dtype_size(x.ds.dtype);
    std::memset(static_cast<char*>(x.ds.data) + first_head * l * sl * size, 0, g * l * sl * size);
  }
  C* s = scratch<C>(0, kRowBlock * kColBlock);
  C* dp = scratch<C>(1, kRowBlock * kColBlock);
  C* d = scratch<C>(2, g * l);  // D - dlogsumexp of each row of the group's heads
  for (int64_t i = 0; i < g * l; ++i) {
    C sum = 0;
    for (int64_t c = 0; c < ev; ++c) sum += t.o[i * ev + c] * t.d_o[i * ev + c];
    d[i] = t.d_lse ? sum - t.d_lse[i] : sum;
  }
  for (int64_t j0 = 0; j0 < sl; j0 += kColBlock) {
    const int64_t cols = std::min(kColBlock, sl - j0);
    // Causal: rows before j0 see none of these columns.
    const int64_t first_row = a.causal ? j0 / kRowBlock * kRowBlock : 0;
    for (int64_t hx = 0; hx < g; ++hx) {
      for (int64_t i0 = first_row; i0 < l; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, l - i0);
        block_grad(a, t, x.ds, first_head, hx, i0, rows, j0, cols, d + hx * l, s, dp);
      }
    }
  }
  store(t.dq, x.dq + first_head * l * e, g * l * e);
  store(t.dk, x.dk + kv_head * sl * e, sl * e);
  store(t.dv, x.dv + kv_head * sl * ev, sl * ev);
}

// T: the dtype of dO, Q, K, V and O; logsumexp and its gradient are compute_t<T>.
template <typename T>
KernelFn make_attention_grad(const Node& node) {
  using C = compute_t<T>;
  const AttentionAttrs attrs = attention_attrs(node);
  return [attrs, where = node.describe()](KernelContext& ctx) {
    const Tensor* mask = ctx.has_in(6) ? &ctx.in(6) : nullptr;
    const uint64_t seed = ctx.has_in(7) ? static_cast<uint64_t>(ctx.in(7).data<int64_t>()[0]) : 0;
    const Attention a = describe_attention(where, ctx.in(1), ctx.in(2), ctx.in(3), mask, attrs, seed);
    // Outputs the node does not want are computed into temporaries: dQ, dK and dV come together.
    std::vector<T> unwanted[3];
    T* grads[3];
    for (int i = 0; i < 3; ++i) {
      if (ctx.has_out(i)) {
        grads[i] = ctx.out(i).data<T>();
      } else {
        unwanted[i].resize(static_cast<size_t>(ctx.in(i + 1).numel()));
        grads[i] = unwanted[i].data();
      }
    }
    const ScoresGrad ds = ctx.has_out(3) ? ScoresGrad{ctx.out(3).raw(), ctx.out(3).dtype()} : ScoresGrad{};
    const GradTensors<T> t{ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.in(3).data<T>(),
                           ctx.in(4).data<T>(), ctx.in(5).data<C>(), ctx.has_in(8) ? ctx.in(8).data<C>() : nullptr,
                           grads[0], grads[1], grads[2], ds};
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
  t.add(domain, "ScaledDotProductAttentionGrad", DType::kBF16, make_attention_grad<BFloat16>);
}

}  // namespace trainrt
