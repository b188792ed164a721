// Gradient rule of ScaledDotProductAttention: one fused ScaledDotProductAttentionGrad node
// (kernels/cpu/attention_grad_kernels.cc) that recomputes the probabilities block by block from
// the forward's O and logsumexp (and, with dropout, the seed of its mask; both outputs of the
// forward node), so the (L, S) attention matrix is never saved.
//   (dQ, dK, dV, [dS]) = ScaledDotProductAttentionGrad(dO, Q, K, V, O, logsumexp, [mask], [seed],
//                                                      [dlogsumexp])
// A gradient flowing into logsumexp (d logsumexp[i] / d S[i][j] = P[i][j]) joins the kernel's.
// A float mask is added to the scaled scores S, so its gradient is dS (B, H, L, S) summed over the
// axes the mask was broadcast along: asked of the kernel only when the mask needs a gradient (a
// learned bias such as T5's relative positions), since dS is as large as the attention matrix.
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"

namespace trainrt {
namespace {

void attention_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const bool mask_grad = n.input(3) && ctx.needs_input_grad(3);
  if (!ctx.output_grad(0))
    throw UnsupportedOp(fmt(n.describe(), ": a gradient flowing into logsumexp alone (none into output 0) is not supported"));
  const bool dropout = n.attr_float("dropout_p", 0.f) > 0.f;
  if (!n.output(1) || (dropout && !n.output(2)))
    throw UnsupportedOp(fmt(n.describe(), ": the gradient needs the node's logsumexp output", dropout ? " and seed output" : "",
                            "; give the node those outputs"));
  std::vector<Value*> inputs{ctx.output_grad(0), n.input(0), n.input(1), n.input(2), n.output(0), n.output(1),
                             n.input(3)};
  inputs.push_back(dropout ? n.output(2) : nullptr);
  inputs.push_back(ctx.output_grad(1));
  while (!inputs.back()) inputs.pop_back();  // trailing optional inputs left out
  std::map<std::string, Attribute> attrs;
  for (const char* name : {"is_causal", "scale", "dropout_p", "seed"})
    if (const Attribute* a = n.attr(name)) attrs[name] = *a;
  const std::vector<bool> wanted{ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2),
                                 mask_grad};
  std::vector<Value*> g = ctx.emit_multi("ScaledDotProductAttentionGrad", inputs, mask_grad ? 4 : 3, attrs,
                                         kTrainrtDomain, wanted);
  for (int i = 0; i < 3; ++i)
    if (g[static_cast<size_t>(i)]) ctx.set_input_grad(i, g[static_cast<size_t>(i)]);
  if (mask_grad) ctx.set_input_grad(3, ctx.reduce_to_shape_of(g[3], n.input(3)));
}

}  // namespace

void register_attention_gradients(GradientRegistry& r) {
  r.add(kTrainrtDomain, "ScaledDotProductAttention", attention_grad);
}

}  // namespace trainrt
