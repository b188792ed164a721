// LinearSoftmaxCrossEntropy (TrainRT domain): a classification head's product, its softmax
// cross-entropy loss and that loss's gradients for dLoss = 1, in one op that never holds the
// (N, C) scores whole (passes/linear_cross_entropy_fusion.h makes it; the CPU kernel is
// kernels/cpu/linear_cross_entropy_kernel.cc).
//
//   LinearSoftmaxCrossEntropy(X (N, K), W, labels (N), [B (C)])
//       -> (loss, [dX (N, K)], [dW (W's shape)], [dB (C)], [scores block (R, C)])
//   scores = X W^T + B when trans_w = 1 (W is (C, K)), X W + B when trans_w = 0 (W is (K, C));
//   loss = SoftmaxCrossEntropyLoss(scores, labels) with `reduction` (mean or sum) and `ignore_index`,
//   and dX, dW, dB the gradients of loss. The kernel holds a block of R rows of scores at a time
//   (ops/linear_cross_entropy_block.h). Output 4, when present, is that block's storage: a value
//   nothing reads, which the plan places in the arena for the node's step (at the forward's end,
//   where the saved values peak and the arena is mostly idle). Without it the kernel takes storage
//   of its own for its run.
//   On bf16 X, W (and B), autocast's head: the scores are the bf16 product's (summed in f32, rounded
//   once), the loss runs in f32 on them, the scores' gradient is rounded to bf16 before the
//   products that make dX, dW and dB, and those three are bf16 (dW and dB summed over the row
//   blocks in f32 and rounded once). Output 4 is then the 1-D f32 workspace that
//   linear_cross_entropy_bf16_workspace sizes.
#include "trainrt/ops/linear_cross_entropy_block.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/ops/register_schemas.h"

namespace trainrt {
namespace {

void infer_linear_cross_entropy(InferenceContext& ctx) {
  const Node& n = ctx.node();
  ctx.expect_dtype(0, {DType::kF32, DType::kBF16});
  const DType dtype = ctx.input_dtype(0);
  if (ctx.input_dtype(1) != dtype)
    ctx.fail(fmt("input 1 (W) is ", dtype_name(ctx.input_dtype(1)), ", expected X's ", dtype_name(dtype)));
  ctx.expect_dtype(2, {DType::kI64, DType::kI32});
  const Shape& x = ctx.input_shape(0);
  const Shape& w = ctx.input_shape(1);
  if (!x.rank_known || x.rank() != 2) ctx.fail(fmt("input 0 (X) has shape ", to_string(x), ", expected (N, K)"));
  if (!w.rank_known || w.rank() != 2) ctx.fail(fmt("input 1 (W) has shape ", to_string(w), ", expected 2-D"));
  const bool trans_w = n.attr_int("trans_w", 1) != 0;
  const Dim k = trans_w ? w.dims[1] : w.dims[0];
  const Dim classes = trans_w ? w.dims[0] : w.dims[1];
  if (k.is_static() && x.dims[1].is_static() && k.value != x.dims[1].value)
    ctx.fail(fmt("input 1 (W) has shape ", to_string(w), ", which does not multiply X ", to_string(x),
                 trans_w ? " as X W^T" : " as X W"));
  if (!classes.is_static()) ctx.fail(fmt("input 1 (W) has shape ", to_string(w), ": the class count must be static"));
  if (ctx.has_input(3)) {
    ctx.expect_dtype(3, {dtype});
    const Shape& b = ctx.input_shape(3);
    if (!b.rank_known || b.rank() != 1 || !b.dims[0].is_static() || b.dims[0].value != classes.value)
      ctx.fail(fmt("input 3 (B) has shape ", to_string(b), ", expected (", classes.value, ")"));
  }
  const std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum") ctx.fail(fmt("reduction '", reduction, "': only mean and sum"));
  ctx.set_output(0, DType::kF32, Shape(std::vector<Dim>{}));
  if (ctx.has_output(1)) ctx.set_output(1, dtype, x);
  if (ctx.has_output(2)) ctx.set_output(2, dtype, w);
  if (ctx.has_output(3)) ctx.set_output(3, dtype, Shape({classes}));
  if (!ctx.has_output(4)) return;
  if (dtype == DType::kF32) {
    ctx.set_output(4, DType::kF32, Shape({Dim(linear_cross_entropy_block_rows(classes.value)), classes}));
    return;
  }
  if (!w.is_static()) ctx.fail(fmt("input 1 (W) has shape ", to_string(w), ": a bf16 head's workspace needs it static"));
  const int64_t w_elements = w.dims[0].value * w.dims[1].value;
  ctx.set_output(4, DType::kF32,
                 Shape({Dim(linear_cross_entropy_bf16_workspace(classes.value, w_elements, ctx.has_output(2),
                                                                ctx.has_output(3)).total)}));
}

}  // namespace

void register_linear_cross_entropy_schema(OpRegistry& r) {
  r.add({.domain = std::string(kTrainrtDomain), .name = "LinearSoftmaxCrossEntropy", .min_inputs = 3,
         .max_inputs = 4, .min_outputs = 1, .max_outputs = 5, .infer = infer_linear_cross_entropy});
}

}  // namespace trainrt
