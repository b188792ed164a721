// CPU kernel of ConvGrad (TrainRT domain): the backward of ONNX Conv on oneDNN's backward-data and
// backward-weights primitives, in f32 and in bf16 (mixed precision: bf16 dY, X, W and outputs).
//
// ConvGrad(dY, X, W) -> (dX, dW, dB), Conv's attributes. Each output is computed only when the
// node has it (the autodiff asks only for the gradients the backward needs):
//   dX (N, C, D...)        backward-data, per batch chunk in parallel (chunks are independent)
//   dW (M, C / group, K...) and dB (M)
//                          backward-weights, per batch chunk in parallel, each chunk into its own
//                          f32 partial sums, added up in chunk order afterwards (the result does
//                          not depend on which thread ran which chunk). In f32 chunk 0 writes the
//                          outputs directly; in bf16 the f32 total is rounded once at the end, so
//                          the sum over the batch never passes through bf16.
// oneDNN computes dB along with dW; when only dB is wanted, dW goes to a scratch buffer.
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/conv_kernels.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Writes f32 values (out.numel() of them) into out, f32 or rounded once to bf16.
void store_f32(const float* v, Tensor& out) {
  if (out.dtype() == DType::kBF16) return convert_from_f32(v, out.data<BFloat16>(), out.numel());
  std::copy_n(v, out.numel(), out.data<float>());
}

// The gradients of an empty problem (no products): dX = 0, dW = 0, dB = the sum of dY over all but
// the channel dim, summed in f32.
void empty_conv_grad(const ConvProblem& p, const Tensor& dy, KernelContext& ctx) {
  for (int i = 0; i < 2; ++i)
    if (ctx.has_out(i)) std::fill_n(static_cast<char*>(ctx.out(i).raw()), ctx.out(i).nbytes(), 0);
  if (!ctx.has_out(2)) return;
  const int64_t batch = p.x[0], m = p.w[0];
  std::vector<float> db(static_cast<size_t>(m), 0.f);
  const int64_t image = batch * m == 0 ? 0 : dy.numel() / (batch * m);
  for (int64_t i = 0; i < batch * m; ++i)
    for (int64_t j = 0; j < image; ++j) db[static_cast<size_t>(i % m)] += static_cast<float>(dy.to_double(i * image + j));
  store_f32(db.data(), ctx.out(2));
}

void conv_grad(ConvKernelState& state, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& w = ctx.in(2);
  const bool want_dw = ctx.has_out(1), want_db = ctx.has_out(2);
  const ConvProblem& p = state.problem(x, w, want_db);
  if (dy.dims() != p.y || dy.dtype() != p.dtype)
    throw ShapeError(fmt(state.node(), ": input 0 (dY) is ", describe(dy), ", but Conv of input 1 ", describe(x),
                         " and input 2 ", describe(w), " gives ", dtype_name(p.dtype), " ", to_string(p.y)));
  if (dy.numel() == 0 || x.numel() == 0 || w.numel() == 0) return empty_conv_grad(p, dy, ctx);
  const int64_t batch = p.x[0], w_size = numel_of(p.w), m = p.w[0];
  const int64_t element = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t x_image = x.numel() / batch * element, y_image = dy.numel() / batch * element;  // bytes
  const auto* dys = static_cast<const char*>(dy.raw());
  const auto* xs = static_cast<const char*>(x.raw());
  auto* dxs = ctx.has_out(0) ? static_cast<char*>(ctx.out(0).raw()) : nullptr;
  const ChunkedProblem& chunked = state.chunked(ctx.threads().num_threads());
  const BatchChunks chunks = chunked.chunks;
  // f32 partial (dW, dB) sums, (chunks.count, w_size + m). In f32, chunk 0 sums straight into the
  // outputs it has. (A thread_local named inside the lambda would be each worker's own: take the
  // pointer here.)
  thread_local std::vector<float> partial_storage;
  const int64_t per_chunk = w_size + m;
  partial_storage.resize(static_cast<size_t>(chunks.count * per_chunk));
  float* const partial = partial_storage.data();
  const bool direct = p.dtype == DType::kF32;
  float* const dw_total = direct && want_dw ? ctx.out(1).data<float>() : partial;
  float* const db_total = direct && want_db ? ctx.out(2).data<float>() : partial + w_size;
  const bool want_weights = want_dw || want_db;
  const ConvWeights wc =
      dxs ? conv_weights(ConvWeightsUse::kBackwardData, chunked.problems, w.raw()) : ConvWeights{w.raw()};
  ctx.threads().parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t n0 = c * chunks.size, n = std::min(chunks.size, batch - n0);
      const ConvProblem& chunk = chunked.of(n);
      if (dxs) conv_backward_data(chunk, dys + n0 * y_image, wc, dxs + n0 * x_image);
      if (!want_weights) continue;
      float* dw = c == 0 ? dw_total : partial + c * per_chunk;
      float* db = c == 0 ? db_total : partial + c * per_chunk + w_size;
      conv_backward_weights(chunk, dys + n0 * y_image, xs + n0 * x_image, dw, db);
    }
  });
  for (int64_t c = 1; c < chunks.count; ++c) {
    const float* dw = partial + c * per_chunk;
    if (want_dw) std::transform(dw, dw + w_size, dw_total, dw_total, std::plus<>());
    if (want_db) std::transform(dw + w_size, dw + per_chunk, db_total, db_total, std::plus<>());
  }
  if (direct) return;
  if (want_dw) store_f32(dw_total, ctx.out(1));
  if (want_db) store_f32(db_total, ctx.out(2));
}

KernelFn make_conv_grad(const Node& node) {
  auto state = std::make_shared<ConvKernelState>(node);
  return [state](KernelContext& ctx) { conv_grad(*state, ctx); };
}

}  // namespace

void register_conv_grad_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "ConvGrad", DType::kF32, make_conv_grad);
  t.add(kTrainrtDomain, "ConvGrad", DType::kBF16, make_conv_grad);
  t.add(kTrainrtDomain, "ConvGrad", DType::kF64, reject_unsupported_conv);
}

}  // namespace trainrt
