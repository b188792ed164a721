// CPU kernels of SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (ONNX opset 13+, the
// semantics of PyTorch's cross_entropy / nll_loss).
//
// scores (N, C, d1, ..., dk) are seen as (N, C, D) with D = d1 * ... * dk, labels as (N, D).
// Sample i = (n, d) with label t has weight w_i = weights[t] (1 without weights), or 0 when
// t == ignore_index, and loss_i = -w_i * logp[n, t, d], where logp = log_softmax(scores) over C
// for SoftmaxCrossEntropyLoss and logp = scores for NegativeLogLikelihoodLoss.
//   reduction none: loss (N, d1, ..., dk);  sum: sum_i loss_i;  mean: sum_i loss_i / sum_i w_i.
// The log-sum-exp over C runs through the ReduceLogSumExp loops (rows when D == 1), computed in
// float (double for f64) and finished in double; losses and totals are double. A label outside
// [0, C) that is not ignore_index is an error naming the node, the position and the label.
// log_prob (SoftmaxCrossEntropyLoss' optional output 1) is written last, element by element from
// the same element of the scores, so it may be written over them.
#include <cmath>
#include <string>

#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct LossSpec {
  std::string node;  // node.describe(), for errors
  bool softmax = false;
  Reduction reduction = Reduction::kMean;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
};

// log_prob[n, c, d] = x[n, c, d] - lse[n, d] for x, log_prob: (N, C, D) and lse: (N, D). The
// double lse is taken away as two floats, high part first, so a large lse cancels exactly.
template <typename T>
void write_log_prob(const T* x, const double* lse, T* log_prob, ReduceGeometry g, ThreadPool& pool) {
  using C = compute_t<T>;
  const int64_t classes = g.reduce, d = g.inner, slab = classes * d;
  pool.parallel_for(g.outer, rows_per_task(slab), [&](int64_t begin, int64_t end) {
    C* hi = scratch<C>(2, d);
    C* lo = scratch<C>(3, d);
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t k = 0; k < d; ++k) {
        hi[k] = static_cast<C>(lse[n * d + k]);
        lo[k] = static_cast<C>(lse[n * d + k] - static_cast<double>(hi[k]));
      }
      // The (C, D) slab of sample n; one contiguous row of C classes when D == 1.
      const int64_t rows = d == 1 ? 1 : classes, cols = d == 1 ? classes : d;
      const Staged<T> in = stage_in(x + n * slab, rows, cols, cols, 0);
      const Staged<T> out = stage_out(log_prob + n * slab, rows, cols, cols, 1);
      if (d == 1) {
        shift(in.data, out.data, hi[0], lo[0], classes);
      } else {
        for (int64_t r = 0; r < rows; ++r) shift_cols(in.data + r * in.stride, out.data + r * out.stride, hi, lo, d);
      }
      commit(out, log_prob + n * slab, rows, cols, cols);
    }
  });
}

template <typename T, typename L>
void compute_loss(const LossSpec& s, KernelContext& ctx, const L* labels) {
  using C = compute_t<T>;
  const Tensor& scores = ctx.in(0);
  const int64_t n_samples = scores.dim(0), classes = scores.dim(1);
  int64_t d = 1;
  for (int64_t i = 2; i < scores.rank(); ++i) d *= scores.dim(i);
  if (ctx.in(1).numel() != n_samples * d)
    throw ShapeError(fmt(s.node, ": input 1 (labels) is ", describe(ctx.in(1)), ", expected ", n_samples * d,
                         " labels for input 0 of shape ", to_string(scores.dims())));
  if (ctx.has_in(2) && ctx.in(2).numel() != classes)
    throw ShapeError(fmt(s.node, ": input 2 (weights) is ", describe(ctx.in(2)), ", expected (", classes, ")"));
  const T* x = scores.data<T>();
  const T* weights = ctx.has_in(2) ? ctx.in(2).data<T>() : nullptr;
  const ReduceGeometry g{n_samples, classes, d};
  thread_local std::vector<double> kept_lse;  // keeps its largest size: no steady-state allocation
  std::vector<double>& lse = kept_lse;
  if (s.softmax) {
    lse.resize(static_cast<size_t>(n_samples * d));
    reduce_along<T, double>(ReduceOp::kLogSumExp, x, lse.data(), g, ctx.threads());
  }
  T* per_sample = s.reduction == Reduction::kNone ? ctx.out(0).data<T>() : nullptr;
  double total = 0, weight_total = 0;
  for (int64_t i = 0; i < n_samples * d; ++i) {
    const int64_t t = static_cast<int64_t>(labels[i]);
    double loss = 0;
    if (!(s.has_ignore_index && t == s.ignore_index)) {
      if (t < 0 || t >= classes)
        throw ShapeError(fmt(s.node, ": label ", t, " at position ", i, " of input 1 is outside [0, ", classes, ")"));
      const double w = weights ? to_compute(weights[t]) : 1.0;
      const int64_t n = i / d, k = i % d;
      double logp = to_compute(x[(n * classes + t) * d + k]);
      if (s.softmax) logp -= lse[static_cast<size_t>(i)];
      loss = -logp * w;
      total += loss;
      weight_total += w;
    }
    if (per_sample) per_sample[i] = from_compute<T>(static_cast<C>(loss));
  }
  if (!per_sample) {
    const double v = s.reduction == Reduction::kMean ? total / weight_total : total;
    *ctx.out(0).data<T>() = from_compute<T>(static_cast<C>(v));
  }
  // Last: log_prob may be written over the scores (the schema's in-place pair), read above.
  if (s.softmax && ctx.has_out(1)) write_log_prob<T>(x, lse.data(), ctx.out(1).data<T>(), g, ctx.threads());
}

template <typename T>
KernelFn make_loss(const Node& node) {
  LossSpec s;
  s.node = node.describe();
  s.softmax = node.op_type() == "SoftmaxCrossEntropyLoss";
  const std::string reduction = node.attr_string("reduction", "mean");
  s.reduction = reduction == "none" ? Reduction::kNone : reduction == "sum" ? Reduction::kSum : Reduction::kMean;
  s.has_ignore_index = node.has_attr("ignore_index");
  s.ignore_index = node.attr_int("ignore_index", 0);
  return [s](KernelContext& ctx) {
    if (ctx.in(1).dtype() == DType::kI32) compute_loss<T>(s, ctx, ctx.in(1).data<int32_t>());
    else compute_loss<T>(s, ctx, ctx.in(1).data<int64_t>());
  };
}

template <typename T>
void register_for(KernelTable& t) {
  t.add("", "SoftmaxCrossEntropyLoss", dtype_of<T>(), make_loss<T>);
  t.add("", "NegativeLogLikelihoodLoss", dtype_of<T>(), make_loss<T>);
}

}  // namespace

void register_loss_kernels(KernelTable& t) {
  register_for<float>(t);
  register_for<double>(t);
  register_for<Half>(t);
  register_for<BFloat16>(t);
}

}  // namespace trainrt
