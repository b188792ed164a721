// CPU kernel of LinearSoftmaxCrossEntropy (ops/linear_cross_entropy_schema.cc), f32 and bf16: a head's
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
// On bf16 X and W (autocast's head) the products run on bf16 operands with f32 sums
// (gemm_batched into f32): each block's scores are rounded to bf16, as the bf16 product's would be, the loss
// runs in f32, the gradient S is rounded to bf16 for the products (as the Cast's gradient does),
// and dW and dB are summed over the blocks in f32 in the workspace and rounded once at the end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "trainrt/core/dtype_convert.h"
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

// The rows' losses and scores' gradients of one block, in place: row i of `scores` (its f32 scores)
// becomes f_i (softmax - onehot(t)), losses[i] its loss. With `grad_bf16`, the scores are first
// rounded to bf16 (the bf16 product's values), and the gradient is rounded to bf16 into grad_bf16's
// row and widened back into the row (so dB's column sums add what the products read).
template <typename L>
void rows_loss_and_gradient(const Spec& s, ThreadPool& pool, float* scores, BFloat16* grad_bf16, int64_t rows,
                            int64_t classes, const float* bias, const L* labels, float scale_mean,
                            std::vector<double>& losses) {
  pool.parallel_for(rows, rows_per_task(classes), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = scores + i * classes;
      if (bias)
        for (int64_t c = 0; c < classes; ++c) row[c] += bias[c];
      if (grad_bf16)
        for (int64_t c = 0; c < classes; ++c) row[c] = bf16_to_f32(f32_to_bf16(row[c]));
      const int64_t t = static_cast<int64_t>(labels[i]);
      if (s.has_ignore_index && t == s.ignore_index) {
        losses[static_cast<size_t>(i)] = 0;
        const float f = s.mean ? 0.f * scale_mean : 0.f;  // NaN when every row is ignored
        if (f == 0.f) std::memset(row, 0, static_cast<size_t>(classes) * sizeof(float));
        else for (int64_t c = 0; c < classes; ++c) row[c] = f;
      } else {
        const float label_score = row[t];
        const float m = row_max(row, classes);
        const float sum = exp_shift_sum(row, row, m, classes);  // row := exp(row - m)
        losses[static_cast<size_t>(i)] =
            static_cast<double>(m) + std::log(static_cast<double>(sum)) - static_cast<double>(label_score);
        const float f = s.mean ? scale_mean : 1.f;
        scale(row, row, f / sum, classes);
        row[t] -= f;
      }
      if (!grad_bf16) continue;
      BFloat16* g = grad_bf16 + i * classes;
      convert_from_f32(row, g, classes);
      convert_to_f32(g, row, classes);
    }
  });
}

// T: float, or BFloat16 for autocast's head (the schema's bf16 form); L: the labels' type.
template <typename T, typename L>
void run(const Spec& s, KernelContext& ctx, const L* labels) {
  constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const int64_t n = x.dim(0), k = x.dim(1);
  const int64_t classes = s.trans_w ? w.dim(0) : w.dim(1);
  if ((s.trans_w ? w.dim(1) : w.dim(0)) != k)
    throw ShapeError(fmt(s.node, ": input 1 (W) is ", describe(w), ", which does not multiply X ", describe(x)));
  if (ctx.in(2).numel() != n)
    throw ShapeError(fmt(s.node, ": input 2 (labels) is ", describe(ctx.in(2)), ", expected ", n, " labels"));
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
  T* dx = ctx.has_out(1) ? ctx.out(1).data<T>() : nullptr;
  T* dw = ctx.has_out(2) ? ctx.out(2).data<T>() : nullptr;
  T* db = ctx.has_out(3) ? ctx.out(3).data<T>() : nullptr;
  thread_local std::vector<double> kept_losses;  // keep their largest size: no steady-state allocation
  thread_local std::vector<float> kept_bias;
  std::vector<double>& losses = kept_losses;
  losses.resize(static_cast<size_t>(block));
  const float* bias = nullptr;
  if (ctx.has_in(3) && kBf16) {
    kept_bias.resize(static_cast<size_t>(classes));
    convert_to_f32(ctx.in(3).data<BFloat16>(), kept_bias.data(), classes);
    bias = kept_bias.data();
  } else if (ctx.has_in(3)) {
    bias = ctx.in(3).data<float>();
  }
  // The scores block (f32) or the bf16 workspace: the node's output 4 (an arena buffer) when it has
  // one, else storage for this run.
  const LinearCrossEntropyWorkspace space =
      kBf16 ? linear_cross_entropy_bf16_workspace(classes, w.numel(), dw != nullptr, db != nullptr)
            : LinearCrossEntropyWorkspace{.total = block * classes};
  Tensor own_space;
  if (ctx.has_out(4) && ctx.out(4).numel() < space.total)
    throw ShapeError(fmt(s.node, ": output 4 (workspace) is ", describe(ctx.out(4)), ", smaller than ", space.total,
                         " floats for ", block, " rows of ", classes, " scores"));
  if (!ctx.has_out(4)) own_space = Tensor::empty(DType::kF32, {space.total});
  float* work = ctx.has_out(4) ? ctx.out(4).data<float>() : own_space.data<float>();
  float* scores = work + space.scores;
  BFloat16* grad_bf16 = kBf16 ? reinterpret_cast<BFloat16*>(work + space.grad_bf16) : nullptr;
  float* dw_sum = kBf16 ? work + space.dw_sum : reinterpret_cast<float*>(dw);  // f32: dW itself
  float* db_sum = kBf16 ? work + space.db_sum : reinterpret_cast<float*>(db);
  if (dw && n == 0) std::memset(dw_sum, 0, static_cast<size_t>(w.numel()) * sizeof(float));
  if (db) std::memset(db_sum, 0, static_cast<size_t>(classes) * sizeof(float));
  const T* xs = x.data<T>();
  const T* ws = w.data<T>();
  const int64_t ldw = s.trans_w ? k : classes;
  double total = 0;
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t rows = std::min(block, n - r0);
    const T* xb = xs + r0 * k;
    gemm_batched<T, float>(1, false, s.trans_w, rows, classes, k, 1.f, xb, k, 0, ws, ldw, 0, 0.f, scores, classes, 0);
    rows_loss_and_gradient(s, ctx.threads(), scores, grad_bf16, rows, classes, bias, labels + r0, scale_mean, losses);
    for (int64_t i = 0; i < rows; ++i) total += losses[static_cast<size_t>(i)];
    // The gradient products read the f32 gradient, or its bf16 rounding.
    const T* grad = nullptr;
    if constexpr (kBf16) grad = grad_bf16;
    else grad = scores;
    if (dx)
      gemm_batched<T>(1, false, !s.trans_w, rows, k, classes, 1.f, grad, classes, 0, ws, ldw, 0, 0.f, dx + r0 * k, k,
                      0);
    const float beta = r0 == 0 ? 0.f : 1.f;  // dW summed over the blocks in f32
    if (dw && s.trans_w)
      gemm_batched<T, float>(1, true, false, classes, k, rows, 1.f, grad, classes, 0, xb, k, 0, beta, dw_sum, k, 0);
    else if (dw)
      gemm_batched<T, float>(1, true, false, k, classes, rows, 1.f, xb, k, 0, grad, classes, 0, beta, dw_sum, classes,
                             0);
    if (db) cols_add(db_sum, scores, rows, classes, classes);
  }
  if constexpr (kBf16) {
    if (dw) convert_from_f32(dw_sum, dw, w.numel());
    if (db) convert_from_f32(db_sum, db, classes);
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
    const bool i32 = ctx.in(2).dtype() == DType::kI32;
    if (ctx.in(0).dtype() == DType::kBF16) {
      if (i32) run<BFloat16>(s, ctx, ctx.in(2).data<int32_t>());
      else run<BFloat16>(s, ctx, ctx.in(2).data<int64_t>());
    } else if (i32) {
      run<float>(s, ctx, ctx.in(2).data<int32_t>());
    } else {
      run<float>(s, ctx, ctx.in(2).data<int64_t>());
    }
  };
}

}  // namespace

void register_linear_cross_entropy_kernels(KernelTable& t) {
  for (DType dtype : {DType::kF32, DType::kBF16})
    t.add(std::string(kTrainrtDomain), "LinearSoftmaxCrossEntropy", dtype, make_linear_cross_entropy);
}

}  // namespace trainrt
