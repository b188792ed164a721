// CPU kernel of LinearSoftmaxCrossEntropy (ops/linear_cross_entropy_schema.cc), f32: a head's
// scores, their softmax cross-entropy and its gradients for dLoss = 1, R rows at a time, so the
// (N, C) scores are never whole (the idea of Liger's fused linear cross-entropy). The block of
// scores (R rows: ops/linear_cross_entropy_block.h) is the node's output 4 when it has one (an arena
// buffer), else storage of the run's own. Per block [r0, r0 + R):
//   S = X[r0:] W^T (+ B)                                   (R, C)
//   per row i with label t: m = max S_i, s = sum exp(S_i - m), loss_i = m + log s - S_it;
//   S_i := f_i (exp(S_i - m) / s - onehot(t)), f_i = 1 / (rows not ignored) for mean, 1 for sum,
//   0 for an ignored row (as SoftmaxCrossEntropyLossGrad's factors)
//   dX[r0:] = S W,  dW += S^T X[r0:],  dB += column sums of S    (dW and dB start at the first block)
// The loss sums the rows' losses in row order in double. dW's sum runs over the blocks in order, so
// it rounds differently from one product over all N rows; within the usual f32 tolerance.
// A label outside [0, C) that is not ignore_index is an error naming the node, position and label.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "trainrt/kernels/cpu/gemm.h"
#include "trainrt/kernels/cpu/reduce_math.h"
#include "trainrt/kernels/cpu/reduce_util.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/linear_cross_entropy_block.h"

namespace trainrt {
namespace {

struct Spec {
  std::string node;  // node.describe(), for errors
  bool trans_w = true;
  bool mean = true;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
};


template <typename L>
void run(const Spec& s, KernelContext& ctx, const L* labels) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const int64_t n = x.dim(0), k = x.dim(1);
  const int64_t classes = s.trans_w ? w.dim(0) : w.dim(1);
  if ((s.trans_w ? w.dim(1) : w.dim(0)) != k)
    throw ShapeError(fmt(s.node, ": input 1 (W) is ", describe(w), ", which does not multiply X ", describe(x)));
  if (ctx.in(2).numel() != n)
    throw ShapeError(fmt(s.node, ": input 2 (labels) is ", describe(ctx.in(2)), ", expected ", n, " labels"));
  const float* bias = ctx.has_in(3) ? ctx.in(3).data<float>() : nullptr;
  const int64_t block = std::max<int64_t>(1, std::min(n, linear_cross_entropy_block_rows(classes)));

  double counted = 0;  // rows not ignored
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = static_cast<int64_t>(labels[i]);
    if (s.has_ignore_index && t == s.ignore_index) continue;
    if (t < 0 || t >= classes)
      throw ShapeError(fmt(s.node, ": label ", t, " at position ", i, " of input 2 is outside [0, ", classes, ")"));
    counted += 1;
  }
  // As SoftmaxCrossEntropyLossGrad: w * (1 / sum w), NaN for every row when all are ignored (0 / 0).
  const float scale_mean = static_cast<float>(1.0 / counted);
  float* dx = ctx.has_out(1) ? ctx.out(1).data<float>() : nullptr;
  float* dw = ctx.has_out(2) ? ctx.out(2).data<float>() : nullptr;
  float* db = ctx.has_out(3) ? ctx.out(3).data<float>() : nullptr;
  if (dw && n == 0) std::memset(dw, 0, static_cast<size_t>(ctx.out(2).nbytes()));
  if (db) std::memset(db, 0, static_cast<size_t>(classes) * sizeof(float));
  thread_local std::vector<double> kept_losses;  // keeps its largest size: no steady-state allocation
  std::vector<double>& losses = kept_losses;
  losses.resize(static_cast<size_t>(block));
  // The node's scores-block output (an arena buffer) when it has one, else storage for this run.
  Tensor own_block;
  if (ctx.has_out(4) && ctx.out(4).numel() < block * classes)
    throw ShapeError(fmt(s.node, ": output 4 (scores block) is ", describe(ctx.out(4)), ", smaller than ", block,
                         " rows of ", classes, " scores"));
  if (!ctx.has_out(4)) own_block = Tensor::empty(DType::kF32, {block, classes});
  float* scores = ctx.has_out(4) ? ctx.out(4).data<float>() : own_block.data<float>();
  const float* xs = x.data<float>();
  const float* ws = w.data<float>();
  double total = 0;
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t rows = std::min(block, n - r0);
    const float* xb = xs + r0 * k;
    gemm_f32(false, s.trans_w, rows, classes, k, 1.f, xb, k, ws, s.trans_w ? k : classes, 0.f, scores, classes);
    ctx.threads().parallel_for(rows, rows_per_task(classes), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float* row = scores + i * classes;
        if (bias)
          for (int64_t c = 0; c < classes; ++c) row[c] += bias[c];
        const int64_t t = static_cast<int64_t>(labels[r0 + i]);
        if (s.has_ignore_index && t == s.ignore_index) {
          losses[static_cast<size_t>(i)] = 0;
          const float f = s.mean ? 0.f * scale_mean : 0.f;  // NaN when every row is ignored
          if (f == 0.f) std::memset(row, 0, static_cast<size_t>(classes) * sizeof(float));
          else for (int64_t c = 0; c < classes; ++c) row[c] = f;
          continue;
        }
        const float label_score = row[t];
        const float m = row_max(row, classes);
        const float sum = exp_shift_sum(row, row, m, classes);  // row := exp(row - m)
        losses[static_cast<size_t>(i)] =
            static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(label_score);
        const float f = s.mean ? scale_mean : 1.f;
        scale(row, row, f / sum, classes);
        row[t] -= f;
      }
    });
    for (int64_t i = 0; i < rows; ++i) total += losses[static_cast<size_t>(i)];
    if (dx) {
      if (s.trans_w) gemm_f32(false, false, rows, k, classes, 1.f, scores, classes, ws, k, 0.f, dx + r0 * k, k);
      else gemm_f32(false, true, rows, k, classes, 1.f, scores, classes, ws, classes, 0.f, dx + r0 * k, k);
    }
    const float beta = r0 == 0 ? 0.f : 1.f;
    if (dw) {
      if (s.trans_w) gemm_f32(true, false, classes, k, rows, 1.f, scores, classes, xb, k, beta, dw, k);
      else gemm_f32(true, false, k, classes, rows, 1.f, xb, k, scores, classes, beta, dw, classes);
    }
    if (db) cols_add(db, scores, rows, classes, classes);
  }
  *ctx.out(0).data<float>() = static_cast<float>(s.mean ? total / counted : total);
}

KernelFn make_linear_cross_entropy(const Node& node) {
  Spec s;
  s.node = node.describe();
  s.trans_w = node.attr_int("trans_w", 1) != 0;
  s.mean = node.attr_string("reduction", "mean") == "mean";
  s.has_ignore_index = node.has_attr("ignore_index");
  s.ignore_index = node.attr_int("ignore_index", 0);
  return [s](KernelContext& ctx) {
    if (ctx.in(2).dtype() == DType::kI32) run(s, ctx, ctx.in(2).data<int32_t>());
    else run(s, ctx, ctx.in(2).data<int64_t>());
  };
}

}  // namespace

void register_linear_cross_entropy_kernels(KernelTable& t) {
  t.add(std::string(kTrainrtDomain), "LinearSoftmaxCrossEntropy", DType::kF32, make_linear_cross_entropy);
}

}  // namespace trainrt
