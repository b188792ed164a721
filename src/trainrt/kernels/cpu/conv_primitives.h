// oneDNN convolution primitives (forward, backward-data, backward-weights) for one problem, created
// once and cached, and the code that runs them on TrainRT's dense tensors.
//
// oneDNN's fast convolution kernels (jit:avx512_core here) want blocked layouts (nChw16c, OIhw16i16o);
// on plain NCHW it falls back to im2col + GEMM (gemm:jit), 1.6-3x slower on a ResNet 3x3 conv on
// this machine. So every primitive is created with format `any` and the operands are reordered
// between our dense (N, C, D...) layout and the one it chose, into per-thread buffers; the
// reorders are cached with the primitive. A problem is one batch chunk of a node's shapes (the
// kernels split the batch into chunks run in parallel, conv_kernels.cc), so a node has at most two
// problems per kind.
//
// Element types: X, W, B, Y, dY and dX are all p.dtype, f32 or bf16. In bf16 oneDNN multiplies
// bf16 operands and sums in f32, rounding Y and dX once (as torch's bf16 convolutions on oneDNN).
// Backward-weights always writes f32 dW and dB, whatever p.dtype: the kernel sums the batch chunks'
// partial gradients in f32 and rounds once at the end (conv_grad_kernels.cc).
//
// Weights are reordered once per node run, not once per chunk (conv_weights): the forward of the
// CNN bench's eight conv shapes (batch 64, chunks of 8, one thread) took 7.2-8.7 ms with W
// reordered per chunk, 6.7-6.9 ms with W reordered once.
//
//   ConvProblem p = conv_problem(spec, x.dims(), w.dims(), /*bias=*/true, DType::kBF16);
//   const ConvWeights wf = conv_weights(ConvWeightsUse::kForward, {p}, w_ptr);  // calling thread
//   conv_forward(p, x_ptr, wf, b_ptr, y_ptr);  // on any thread, single-threaded
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/core/dtype.h"
#include "trainrt/ops/conv_args.h"

namespace trainrt {

// One convolution as oneDNN sees it: concrete dims of one batch chunk and resolved padding.
struct ConvProblem {
  std::vector<int64_t> x, w, y;  // (n, C, D...), (M, C / group, K...), (n, M, O...)
  std::vector<int64_t> strides, dilations, pad_begin, pad_end;  // (k) each; ONNX dilations (1 = dense)
  int64_t group = 1;
  bool bias = false;  // forward adds B, backward-weights computes dB
  DType dtype = DType::kF32;  // of X, W, B, Y, dY, dX: kF32 or kBF16
  bool operator==(const ConvProblem&) const = default;
};

// The problem of a whole node run; `where` names the node in errors (bad shapes: ShapeError).
ConvProblem conv_problem(const std::string& where, const ConvParams& params, const std::vector<int64_t>& x,
                         const std::vector<int64_t>& w, bool bias, DType dtype);
// The same problem for images [0, n) of the batch only.
ConvProblem with_batch(ConvProblem p, int64_t n);

// The batch of n images split into `count` chunks of `size` images (the last may be smaller, so a
// node meets at most two chunk problems): up to 4 per thread, so the pool can balance the chunks
// when a thread is preempted, but at least kMinChunkOutputs output positions per chunk: oneDNN's
// kernels lose 10-25% per image on chunks of 8 images of a 4x4 map (CNN bench shapes, 128
// channels, against 16 images). A batch of one image runs on one thread. `image_outputs` is the
// product of Y's spatial dims.
inline constexpr int64_t kMinChunkOutputs = 256;
struct BatchChunks {
  int64_t count = 1;
  int64_t size = 0;
};
BatchChunks batch_chunks(int64_t n, int threads, int64_t image_outputs);
// The (one or two) distinct problems of p's batch chunks.
std::vector<ConvProblem> chunk_problems(const ConvProblem& p, const BatchChunks& chunks);

// The primitives that read W: forward (Y from X and W) and backward-data (dX from dY and W).
enum class ConvWeightsUse { kForward, kBackwardData };

// W as the chunks' primitives read it: in our dense layout, or reordered into the layout they
// chose (`reordered`).
struct ConvWeights {
  const void* data = nullptr;
  bool reordered = false;
  std::shared_ptr<void> storage;  // the reordered copy's, held as long as this lives
};
// W (p.dtype elements, dense) for the primitives of `use` over the given chunk problems (at most
// two: a node's chunks and its smaller last one). When they all chose one layout other than
// dense, W is reordered once into the calling thread's kSharedOperandSlot scratch (valid while the
// result lives and until the thread's next call; the pool's workers only read it); otherwise W
// stays as it is and each run reorders it.
ConvWeights conv_weights(ConvWeightsUse use, const std::vector<ConvProblem>& chunks, const void* w);

// Y = conv(X, W) + B on the calling thread, every pointer to p.dtype elements. b is read only when
// p.bias. w from conv_weights(kForward, ...) with p among its chunks.
void conv_forward(const ConvProblem& p, const void* x, ConvWeights w, const void* b, void* y);
// dX = the gradient of sum(Y * dY) with respect to X; p.dtype elements. w from
// conv_weights(kBackwardData, ...) with p among its chunks.
void conv_backward_data(const ConvProblem& p, const void* dy, ConvWeights w, void* dx);
// dW (and dB when p.bias) = the gradients of sum(Y * dY) with respect to W (and B), overwritten, in
// f32 from dY and X in p.dtype.
void conv_backward_weights(const ConvProblem& p, const void* dy, const void* x, float* dw, float* db);

}  // namespace trainrt
