// CPU kernel of ONNX Conv: oneDNN's convolution forward primitive (conv_primitives.h), in f32 and in
// bf16 (bf16 X, W, B and Y, f32 sums: mixed precision; f16 and f64 are rejected).
//
// X (N, C, D...), W (M, C / group, K...), optional B (M) -> Y (N, M, O...), 1-D to 3-D, every
// auto_pad mode (conv_args.h). The batch is split into chunks run in parallel on the ThreadPool,
// each a single-threaded oneDNN call (see conv_primitives.cc for why not oneDNN's OpenMP threads).
// The problem (dims, padding) is worked out once per input shape and kept with the kernel, so
// steady-state steps only look their primitive up.
#include <algorithm>
#include <memory>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/kernels/cpu/conv_kernels.h"
#include "trainrt/kernels/cpu/conv_primitives.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

ConvKernelState::ConvKernelState(const Node& node) : node_(node.describe()), attrs_(&node) {}

const ConvProblem& ConvKernelState::problem(const Tensor& x, const Tensor& w, bool bias) {
  if (!valid_ || x.dims() != problem_.x || w.dims() != problem_.w || bias != problem_.bias ||
      x.dtype() != problem_.dtype) {
    if (x.rank() < 3 || x.rank() > 5)
      throw ShapeError(fmt(node_, ": input 0 (X) is ", describe(x), ", expected rank 3, 4 or 5 (N, C, D...)"));
    if (params_rank_ != x.rank()) {
      params_ = conv_params(*attrs_, x.rank() - 2);
      params_rank_ = x.rank();
    }
    if (w.dtype() != x.dtype())
      throw ShapeError(fmt(node_, ": input 1 (W) is ", describe(w), ", expected dtype ", dtype_name(x.dtype()),
                           " like input 0 (X)"));
    valid_ = false;
    chunked_threads_ = 0;
    problem_ = conv_problem(node_, params_, x.dims(), w.dims(), bias, x.dtype());
    valid_ = true;
  }
  return problem_;
}

const ChunkedProblem& ConvKernelState::chunked(int threads) {
  TRAINRT_CHECK(valid_, node_, ": batch chunks asked for before the problem");
  if (chunked_threads_ != threads) {
    const int64_t image_outputs = numel_of(problem_.y) / std::max<int64_t>(1, problem_.y[0] * problem_.y[1]);
    chunked_.chunks = batch_chunks(problem_.x[0], threads, image_outputs);
    chunked_.problems = chunk_problems(problem_, chunked_.chunks);
    chunked_threads_ = threads;
  }
  return chunked_;
}

namespace {

void conv(ConvKernelState& state, KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const bool bias = ctx.has_in(2);
  const ConvProblem& p = state.problem(x, w, bias);
  if (bias && (ctx.in(2).rank() != 1 || ctx.in(2).dim(0) != p.w[0] || ctx.in(2).dtype() != p.dtype))
    throw ShapeError(fmt(state.node(), ": input 2 (B) is ", describe(ctx.in(2)), ", expected ", dtype_name(p.dtype),
                         " (", p.w[0], ")"));
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const Tensor* b = bias ? &ctx.in(2) : nullptr;
  if (x.numel() == 0 || w.numel() == 0) return fill_with_bias(p, b, y);
  const int64_t element = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t x_image = x.numel() / p.x[0] * element, y_image = y.numel() / p.y[0] * element;  // bytes
  const auto* xs = static_cast<const char*>(x.raw());
  auto* ys = static_cast<char*>(y.raw());
  const ChunkedProblem& chunked = state.chunked(ctx.threads().num_threads());
  const BatchChunks chunks = chunked.chunks;
  const ConvWeights wc = conv_weights(ConvWeightsUse::kForward, chunked.problems, w.raw());
  ctx.threads().parallel_for(chunks.count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t n0 = c * chunks.size, n = std::min(chunks.size, p.x[0] - n0);
      conv_forward(chunked.of(n), xs + n0 * x_image, wc, b ? b->raw() : nullptr, ys + n0 * y_image);
    }
  });
}

KernelFn make_conv(const Node& node) {
  auto state = std::make_shared<ConvKernelState>(node);
  return [state](KernelContext& ctx) { conv(*state, ctx); };
}

}  // namespace

namespace {

template <typename T>
void fill_with_bias_as(const ConvProblem& p, const T* b, T* y) {
  const int64_t image = numel_of(p.y) / std::max<int64_t>(1, p.y[0] * p.y[1]);
  for (int64_t i = 0; i < p.y[0] * p.y[1]; ++i) std::fill(y + i * image, y + (i + 1) * image, b ? b[i % p.y[1]] : T{});
}

}  // namespace

void fill_with_bias(const ConvProblem& p, const Tensor* b, Tensor& y) {
  if (p.dtype == DType::kBF16) return fill_with_bias_as(p, b ? b->data<BFloat16>() : nullptr, y.data<BFloat16>());
  fill_with_bias_as(p, b ? b->data<float>() : nullptr, y.data<float>());
}

KernelFn reject_unsupported_conv(const Node& node) {
  throw UnsupportedOp(fmt(node.describe(), ": ", node.op_type(), " runs on oneDNN in f32 and bf16 only, got dtype ",
                          dtype_name(KernelTable::key_dtype(node)), " (cast the model to float32)"));
}

void register_conv_kernels(KernelTable& t) {
  t.add("", "Conv", DType::kF32, make_conv);
  t.add("", "Conv", DType::kBF16, make_conv);
  t.add("", "Conv", DType::kF64, reject_unsupported_conv);
}

}  // namespace trainrt
