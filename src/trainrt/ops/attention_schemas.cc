// Schemas of TrainRT's fused attention (torch.nn.functional.scaled_dot_product_attention):
//   ScaledDotProductAttention(Q, K, V, [mask]) -> (O, logsumexp, [seed])
//   ScaledDotProductAttentionGrad(dO, Q, K, V, O, logsumexp, [mask], [seed], [dlogsumexp])
//     -> (dQ, dK, dV, [dS])
//
// Q (B, H, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev) with H a multiple of Hkv (grouped-query
// attention: query head h reads key/value head h / (H / Hkv), torch's enable_gqa). Q, K, V are f32,
// f64 or bf16 (computed in f32, as torch's CPU flash kernel does under autocast). The mask, bool
// (true = keep) or of Q's dtype (or f32 with bf16 Q; added to the scores), broadcasts to (B, H, L, S).
// O is (B, H, L, Ev) of Q's dtype; logsumexp (B, H, L) is each row's log sum exp of the scaled, masked
// scores, which the gradient needs to recompute the probabilities block by block: f32 for bf16 Q
// (torch's too). dS (B, H, L, S), of the float mask's dtype (else Q's), is the
// gradient of the scaled, masked scores, i.e. of a float mask broadcast to (B, H, L, S): the
// gradient rule sums it to the mask's shape when the mask is learned (T5's position bias). seed (an i64 scalar) is
// the seed the forward's dropout drew its mask from, so the gradient redraws the same mask.
// Attributes: is_causal (0/1, torch's top-left aligned tril), scale (default 1/sqrt(E)),
// dropout_p (default 0), seed (optional: a fixed dropout seed instead of the run's, as Dropout's
// `seed`; for tests). Kernels: kernels/cpu/attention_kernels.cc.
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

// Named dims of the four attention tensors, as they appear in error messages.
constexpr const char* kQueryDims = "(B, H, L, E)";
constexpr const char* kKeyDims = "(B, Hkv, S, E)";
constexpr const char* kValueDims = "(B, Hkv, S, Ev)";

// The rank-4 shape of input i, or four unknown dims when its rank is unknown.
std::vector<Dim> dims4(const InferenceContext& ctx, int i, const char* layout) {
  const Shape& s = ctx.input_shape(i);
  if (!s.rank_known) return std::vector<Dim>(4);
  if (s.rank() != 4) ctx.fail(fmt("input ", i, " has shape ", to_string(s), ", expected ", layout));
  return s.dims;
}

// The dim two inputs must share (their `what`): the static one when either is, else a's.
Dim same_dim(const InferenceContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.is_static() && b.is_static() && a.value != b.value)
    ctx.fail(fmt(what, " differ: ", a.value, " and ", b.value));
  return a.is_static() ? a : b.is_static() ? b : a;
}

void check_attributes(const InferenceContext& ctx) {
  const int64_t causal = ctx.node().attr_int("is_causal", 0);
  if (causal != 0 && causal != 1) ctx.fail(fmt("is_causal is ", causal, ", expected 0 or 1"));
  const float p = ctx.node().attr_float("dropout_p", 0.f);
  if (!(p >= 0.f && p <= 1.f)) ctx.fail(fmt("dropout_p ", p, " is outside [0, 1]"));
}

// Checks Q, K, V and the mask at inputs q, q+1, q+2 and mask (when given); returns
// {B, H, L, S, E, Ev}.
struct AttentionDims {
  Dim b, h, l, s, e, ev;
};

// The dtype of logsumexp: f32 for bf16 Q (bf16 would shift the gradient's probabilities by 3%).
DType compute_dtype(DType t) { return t == DType::kBF16 ? DType::kF32 : t; }

// Whether a mask of dtype m is added to (or, bool, applied to) the scores of Q of dtype q.
bool mask_dtype_ok(DType m, DType q) { return m == DType::kBool || m == q || (q == DType::kBF16 && m == DType::kF32); }

AttentionDims check_attention_inputs(InferenceContext& ctx, int q, int mask) {
  ctx.expect_dtype(q, {DType::kF32, DType::kF64, DType::kBF16});
  for (int i = q + 1; i <= q + 2; ++i)
    if (ctx.input_dtype(i) != ctx.input_dtype(q))
      ctx.fail(fmt("input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                   dtype_name(ctx.input_dtype(q)), " like input ", q, " (Q)"));
  const std::vector<Dim> qd = dims4(ctx, q, kQueryDims);
  const std::vector<Dim> kd = dims4(ctx, q + 1, kKeyDims);
  const std::vector<Dim> vd = dims4(ctx, q + 2, kValueDims);
  const auto shapes = [&] {
    return fmt(" (Q ", to_string(ctx.input_shape(q)), ", K ", to_string(ctx.input_shape(q + 1)), ", V ",
               to_string(ctx.input_shape(q + 2)), ")");
  };
  AttentionDims d;
  d.b = same_dim(ctx, same_dim(ctx, qd[0], kd[0], "batch dims of Q and K" + shapes()), vd[0],
                 "batch dims of Q and V" + shapes());
  const Dim hkv = same_dim(ctx, kd[1], vd[1], "head dims of K and V" + shapes());
  d.h = qd[1];
  if (d.h.is_static() && hkv.is_static() && (hkv.value == 0 || d.h.value % hkv.value != 0))
    ctx.fail(fmt("Q has ", d.h.value, " heads, not a multiple of K and V's ", hkv.value, shapes()));
  d.l = qd[2];
  d.s = same_dim(ctx, kd[2], vd[2], "sequence dims of K and V" + shapes());
  d.e = same_dim(ctx, qd[3], kd[3], "head sizes of Q and K" + shapes());
  d.ev = vd[3];
  if (!ctx.has_input(mask)) return d;
  if (!mask_dtype_ok(ctx.input_dtype(mask), ctx.input_dtype(q)))
    ctx.fail(fmt("input ", mask, " (mask) has dtype ", dtype_name(ctx.input_dtype(mask)), ", expected bool or ",
                 dtype_name(ctx.input_dtype(q)), " like Q", ctx.input_dtype(q) == DType::kBF16 ? " (or f32)" : ""));
  const Shape& m = ctx.input_shape(mask);
  if (!m.rank_known) return d;
  const Dim full[4] = {d.b, d.h, d.l, d.s};
  bool fits = m.rank() <= 4;
  for (int64_t i = 0; fits && i < m.rank(); ++i) {
    const Dim& md = m.dims[static_cast<size_t>(i)];
    const Dim& fd = full[4 - m.rank() + i];
    fits = !(md.is_static() && md.value != 1 && fd.is_static() && md.value != fd.value);
  }
  if (!fits)
    ctx.fail(fmt("input ", mask, " (mask) has shape ", to_string(m), ", which does not broadcast to (B, H, L, S) = ",
                 to_string(Shape(std::vector<Dim>(full, full + 4)))));
  return d;
}

void infer_attention(InferenceContext& ctx) {
  check_attributes(ctx);
  const AttentionDims d = check_attention_inputs(ctx, 0, 3);
  const DType t = ctx.input_dtype(0);
  ctx.set_output(0, t, Shape({d.b, d.h, d.l, d.ev}));
  ctx.set_output(1, compute_dtype(t), Shape({d.b, d.h, d.l}));
  ctx.set_output(2, DType::kI64, Shape(std::vector<Dim>{}));
}

// Fails unless input i has dtype t and the given dims (unknown dims pass).
void expect_input(const InferenceContext& ctx, int i, const char* what, DType t, const std::vector<Dim>& dims) {
  if (ctx.input_dtype(i) != t)
    ctx.fail(fmt("input ", i, " (", what, ") has dtype ", dtype_name(ctx.input_dtype(i)), ", expected ",
                 dtype_name(t)));
  const Shape& s = ctx.input_shape(i);
  bool fits = !s.rank_known || s.rank() == static_cast<int64_t>(dims.size());
  for (size_t k = 0; fits && s.rank_known && k < dims.size(); ++k)
    fits = !(s.dims[k].is_static() && dims[k].is_static() && s.dims[k].value != dims[k].value);
  if (!fits) ctx.fail(fmt("input ", i, " (", what, ") has shape ", to_string(s), ", expected ", to_string(Shape(dims))));
}

void infer_attention_grad(InferenceContext& ctx) {
  check_attributes(ctx);
  const AttentionDims d = check_attention_inputs(ctx, 1, 6);
  const DType t = ctx.input_dtype(1);
  expect_input(ctx, 0, "dO", t, {d.b, d.h, d.l, d.ev});
  expect_input(ctx, 4, "O", t, {d.b, d.h, d.l, d.ev});
  expect_input(ctx, 5, "logsumexp", compute_dtype(t), {d.b, d.h, d.l});
  if (ctx.has_input(7)) expect_input(ctx, 7, "seed", DType::kI64, {});
  if (ctx.has_input(8)) expect_input(ctx, 8, "dlogsumexp", compute_dtype(t), {d.b, d.h, d.l});
  if (ctx.node().attr_float("dropout_p", 0.f) > 0.f && !ctx.has_input(7))
    ctx.fail("dropout_p > 0 needs input 7 (the forward's dropout seed)");
  for (int i = 1; i <= 3; ++i) ctx.set_output(i - 1, t, ctx.input_shape(i));
  const bool float_mask = ctx.has_input(6) && ctx.input_dtype(6) != DType::kBool;
  ctx.set_output(3, float_mask ? ctx.input_dtype(6) : t, Shape({d.b, d.h, d.l, d.s}));
}

}  // namespace

void register_attention_schemas(OpRegistry& r) {
  const std::string trainrt(kTrainrtDomain);
  // Random when dropout_p > 0: never folded or deduplicated, and recompute must not replay it.
  r.add({.domain = trainrt, .name = "ScaledDotProductAttention", .min_inputs = 3, .max_inputs = 4,
         .min_outputs = 1, .max_outputs = 3, .infer = infer_attention, .deterministic = false});
  r.add({.domain = trainrt, .name = "ScaledDotProductAttentionGrad", .min_inputs = 6, .max_inputs = 9,
         .min_outputs = 1, .max_outputs = 4, .infer = infer_attention_grad});
}

}  // namespace trainrt
