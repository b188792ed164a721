// CPU kernel of ConvGrad (TrainRT domain): the backward of ONNX Conv on oneDNN's backward-data and
// backward-weights primitives, f32 only.
//
// ConvGrad(dY, X, W) -> (dX, dW, dB), Conv's attributes. Each output is computed only when the
// node has it (the autodiff asks only for the gradients the backward needs):
//   dX (N, C, D...)        backward-data, per batch chunk in parallel (chunks are independent)
//   dW (M, C / group, K...) and dB (M)
//                          backward-weights, per batch chunk in parallel: chunk 0 writes the
//                          outputs, the others their own partial sums, added up in chunk order
//                          afterwards (the result does not depend on which thread ran which chunk)
// oneDNN computes dB along with dW; when only dB is wanted, dW goes to a scratch buffer.
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/conv_kernels.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

void conv_grad(ConvKernelState& state, KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& w = ctx.in(2);
  const bool want_dw = ctx.has_out(1), want_db = ctx.has_out(2);
  const ConvProblem& p = state.problem(x, w, want_db);
  if (dy.dims() != p.y)
    throw ShapeError(fmt(state.node(), ": input 0 (dY) is ", describe(dy), ", but Conv of input 1 ", describe(x),
                         " and input 2 ", describe(w), " gives ", to_string(p.y)));
  const int64_t batch = p.x[0], w_size = numel_of(p.w), m = p.w[0];
  const bool empty = dy.numel() == 0 || x.numel() == 0 || w.numel() == 0;
  if (empty) {  // no products: dX = 0, dW = 0, dB = sum of dY over all but the channel dim
    if (ctx.has_out(0)) std::fill_n(ctx.out(0).data<float>(), ctx.out(0).numel(), 0.f);
    if (want_dw) std::fill_n(ctx.out(1).data<float>(), w_size, 0.f);
    if (want_db) {
      float* db = ctx.out(2).data<float>();
      std::fill_n(db, m, 0.f);
      const int64_t image = batch * m == 0 ? 0 : dy.numel() / (batch * m);
      for (int64_t i = 0; i < batch * m; ++i)
        for (int64_t j = 0; j < image; ++j) db[i % m] += dy.data<float>()[i * image + j];
    }
    return;
  }
  const int64_t x_image = x.numel() / batch, y_image = dy.numel() / batch;
  const BatchChunks chunks = batch_chunks(batch, ctx.threads().num_threads());
  // Partial (dW, dB) sums of chunks 1.. (and chunk 0's dW when only dB is wanted).
  // (A thread_local named inside the lambda would be each worker's own: take the pointer here.)
  thread_local std::vector<float> partial_storage;
  const int64_t per_chunk = w_size + m;
  partial_storage.resize(static_cast<size_t>(chunks.count * per_chunk));
  float* const partial = partial_storage.data();
  const bool want_weights = want_dw || want_db;
  ctx.threads().parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t n0 = c * chunks.size, n = std::min(chunks.size, batch - n0);
      const ConvProblem chunk = with_batch(p, n);
      const float* dyc = dy.data<float>() + n0 * y_image;
      if (ctx.has_out(0))
        conv_backward_data(chunk, dyc, w.data<float>(), ctx.out(0).data<float>() + n0 * x_image);
      if (!want_weights) continue;
      float* dw = partial + c * per_chunk;
      float* db = dw + w_size;
      if (c == 0 && want_dw) dw = ctx.out(1).data<float>();
      if (c == 0 && want_db) db = ctx.out(2).data<float>();
      conv_backward_weights(chunk, dyc, x.data<float>() + n0 * x_image, dw, db);
    }
  });
  for (int64_t c = 1; c < chunks.count; ++c) {
    const float* dw = partial + c * per_chunk;
    if (want_dw) std::transform(dw, dw + w_size, ctx.out(1).data<float>(), ctx.out(1).data<float>(), std::plus<>());
    if (want_db)
      std::transform(dw + w_size, dw + per_chunk, ctx.out(2).data<float>(), ctx.out(2).data<float>(), std::plus<>());
  }
}

KernelFn make_conv_grad(const Node& node) {
  auto state = std::make_shared<ConvKernelState>(node);
  return [state](KernelContext& ctx) { conv_grad(*state, ctx); };
}

}  // namespace

void register_conv_grad_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "ConvGrad", DType::kF32, make_conv_grad);
  for (DType d : {DType::kF16, DType::kBF16, DType::kF64}) t.add(kTrainrtDomain, "ConvGrad", d, reject_non_f32_conv);
}

}  // namespace trainrt
