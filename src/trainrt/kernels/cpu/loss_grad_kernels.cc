// CPU kernels of SoftmaxCrossEntropyLossGrad and NegativeLogLikelihoodLossGrad (TrainRT
// domain): the backward of the ONNX losses with respect to their scores (PyTorch
// nll_loss_backward and cross_entropy via log_softmax_backward; ONNX Runtime
// SoftmaxCrossEntropyLossGrad).
//
//   SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, [weights]) -> dX (N, C, d1, ..., dk)
//   NegativeLogLikelihoodLossGrad(dLoss, shape, labels, [weights])  -> dX of dims `shape`
// Attributes reduction and ignore_index as on the forward node. Seen as (N, C, D) with
// D = d1 * ... * dk, sample i = (n, d) with label t gets the factor
//   s_i = 0 when t == ignore_index, else w_t * dLoss_i (none), w_t * dLoss (sum), or
//         w_t * dLoss / sum_j w_j (mean; the sum over samples not ignored, w = 1 without weights)
// and then
//   softmax cross-entropy: dX[n, c, d] = (exp(log_prob[n, c, d]) - [c == t]) * s_i
//   nll:                   dX[n, c, d] = -[c == t] * s_i
// Labels outside [0, C) that are not ignore_index are an error naming the node and position.
// f32 and f64, and f16 / bf16 computed in f32 and rounded once (as torch's kernels); labels i32 or i64.
#include <cstring>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/reduce_grad_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/cpu/reduction_grad_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct LossGradSpec {
  std::string node;  // node.describe(), for errors
  bool softmax = false;
  Reduction reduction = Reduction::kMean;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
};

// The per-sample factors s (N * D) described above, in the compute type C of T (float for f16 and bf16).
template <typename T, typename L>
void sample_factors(const LossGradSpec& s, const KernelContext& ctx, const L* labels, int64_t samples,
                    int64_t classes, compute_t<T>* factor) {
  using C = compute_t<T>;
  const Tensor& dloss = ctx.in(0);
  const T* weights = ctx.has_in(3) ? ctx.in(3).data<T>() : nullptr;
  const int64_t expected = s.reduction == Reduction::kNone ? samples : 1;
  if (dloss.numel() != expected)
    throw ShapeError(fmt(s.node, ": input 0 (dLoss) is ", describe(dloss), ", expected ", expected, " values"));
  if (weights && ctx.in(3).numel() != classes)
    throw ShapeError(fmt(s.node, ": input 3 (weights) is ", describe(ctx.in(3)), ", expected (", classes, ")"));
  const T* g = dloss.data<T>();
  double weight_total = 0;
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t t = static_cast<int64_t>(labels[i]);
    if (s.has_ignore_index && t == s.ignore_index) {
      factor[i] = C(0);
      continue;
    }
    if (t < 0 || t >= classes)
      throw ShapeError(fmt(s.node, ": label ", t, " at position ", i, " of input 2 is outside [0, ", classes, ")"));
    const C w = weights ? to_compute(weights[t]) : C(1);
    weight_total += static_cast<double>(w);
    factor[i] = w * to_compute(g[s.reduction == Reduction::kNone ? i : 0]);
  }
  if (s.reduction == Reduction::kMean) {
    const C inv = static_cast<C>(1.0 / weight_total);
    for (int64_t i = 0; i < samples; ++i) factor[i] *= inv;
  }
}

// f16 / bf16 slabs are staged in float (reduce_util.h) and dX rounded once on store.
template <typename T, typename L>
void loss_grad(const LossGradSpec& s, KernelContext& ctx, const L* labels) {
  using C = compute_t<T>;
  Tensor& dx = ctx.out(0);
  if (dx.rank() < 2)
    throw ShapeError(fmt(s.node, ": the gradient has shape ", to_string(dx.dims()), ", expected (N, C, d1, ..., dk)"));
  const int64_t n_samples = dx.dim(0), classes = dx.dim(1);
  int64_t d = 1;
  for (int64_t i = 2; i < dx.rank(); ++i) d *= dx.dim(i);
  if (ctx.in(2).numel() != n_samples * d)
    throw ShapeError(fmt(s.node, ": input 2 (labels) is ", describe(ctx.in(2)), ", expected ", n_samples * d,
                         " labels for a gradient of shape ", to_string(dx.dims())));
  if (s.softmax && ctx.in(1).dims() != dx.dims())
    throw ShapeError(fmt(s.node, ": input 1 (log_prob) is ", describe(ctx.in(1)), ", expected shape ",
                         to_string(dx.dims())));
  C* factor = scratch<C>(0, n_samples * d);
  sample_factors<T>(s, ctx, labels, n_samples * d, classes, factor);
  const T* log_prob = s.softmax ? ctx.in(1).data<T>() : nullptr;
  T* out = dx.data<T>();
  const int64_t slab = classes * d;
  ctx.threads().parallel_for(n_samples, rows_per_task(slab), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const Staged<T> o_slab = stage_out(out + n * slab, 1, slab, slab, 2);
      C* o = o_slab.data;
      const C* f = factor + n * d;
      if (!s.softmax) {
        std::memset(static_cast<void*>(o), 0, static_cast<size_t>(slab) * sizeof(C));
      } else {
        const C* lp = stage_in(log_prob + n * slab, 1, slab, slab, 1).data;
        if (d == 1) exp_scale(lp, o, f[0], classes);
        else
          for (int64_t c = 0; c < classes; ++c) exp_scale_cols(lp + c * d, o + c * d, f, d);
      }
      for (int64_t k = 0; k < d; ++k) {
        const int64_t t = static_cast<int64_t>(labels[n * d + k]);
        if (f[k] != C(0)) o[t * d + k] -= f[k];  // ignored samples (f = 0) may have any label
      }
      commit(o_slab, out + n * slab, 1, slab, slab);
    }
  });
}

template <typename T>
KernelFn make_loss_grad(const Node& node) {
  LossGradSpec s;
  s.node = node.describe();
  s.softmax = node.op_type() == "SoftmaxCrossEntropyLossGrad";
  const std::string reduction = node.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw InvalidModel(fmt(s.node, ": reduction '", reduction, "' is not one of none, sum, mean"));
  s.reduction = reduction == "none" ? Reduction::kNone : reduction == "sum" ? Reduction::kSum : Reduction::kMean;
  s.has_ignore_index = node.has_attr("ignore_index");
  s.ignore_index = node.attr_int("ignore_index", 0);
  return [s](KernelContext& ctx) {
    if (ctx.in(2).dtype() == DType::kI32) loss_grad<T>(s, ctx, ctx.in(2).data<int32_t>());
    else loss_grad<T>(s, ctx, ctx.in(2).data<int64_t>());
  };
}

}  // namespace

void register_loss_grad_kernels(KernelTable& t) {
  for (const char* op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
    t.add(kTrainrtDomain, op, DType::kF32, make_loss_grad<float>);
    t.add(kTrainrtDomain, op, DType::kF64, make_loss_grad<double>);
    t.add(kTrainrtDomain, op, DType::kBF16, make_loss_grad<BFloat16>);
    t.add(kTrainrtDomain, op, DType::kF16, make_loss_grad<Half>);
  }
}

}  // namespace trainrt
