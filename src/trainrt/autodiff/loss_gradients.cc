// Gradient rules of SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: one fused TrainRT op
// each, with the forward node's reduction and ignore_index (PyTorch cross_entropy / nll_loss
// backward; ONNX Runtime SoftmaxCrossEntropyLossGrad).
//
// SoftmaxCrossEntropyLoss(scores, labels, [weights]) -> (loss, [log_prob]):
//   dScores = SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, [weights])
//           (+ LogSoftmaxGrad(dLogProb, log_prob) along the class axis when log_prob has a
//             gradient of its own).
//   log_prob is the node's optional output 1; when the node does not produce it the rule
//   recomputes it with LogSoftmax along axis 1, leaving the forward node as it is.
// NegativeLogLikelihoodLoss(input, labels, [weights]) -> loss:
//   dInput = NegativeLogLikelihoodLossGrad(dLoss, Shape(input), labels, [weights]).
// Labels are integers and get no gradient. Weights get none either: like PyTorch, asking for
// one is an error (UnsupportedOp naming the node).
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/reduction_gradients.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/core/error.h"

namespace trainrt {
namespace {

void reject_weight_grad(const GradContext& ctx) {
  if (ctx.needs_input_grad(2))
    throw UnsupportedOp(fmt(ctx.node().describe(), ": the gradient with respect to input 2 (weights) is not "
                                                   "supported (as in PyTorch); treat the weights as constants"));
}

// reduction and ignore_index, copied from the forward node.
std::map<std::string, Attribute> loss_attrs(const Node& n) {
  std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(n.attr_string("reduction", "mean"))}};
  if (n.has_attr("ignore_index")) attrs["ignore_index"] = Attribute::of_int(n.attr_int("ignore_index", 0));
  return attrs;
}

// log_softmax(scores) along the class axis 1: the node's output 1, or recomputed. Before opset 13
// LogSoftmax normalizes X coerced to 2-D at its axis, which is axis 1 only for 2-D scores; N-d
// scores then have their class axis moved last and back.
Value* log_prob_of(GradContext& ctx) {
  if (Value* lp = ctx.output(1)) return lp;
  Value* x = ctx.input(0);
  if (ctx.node().opset() >= 13 || (x->shape.rank_known && x->shape.rank() == 2))
    return ctx.emit("LogSoftmax", {x}, {{"axis", Attribute::of_int(1)}});
  if (!x->shape.rank_known)
    throw UnsupportedOp(fmt(ctx.node().describe(), ": at opset ", ctx.node().opset(),
                            " the gradient needs scores of known rank or the log_prob output"));
  const int64_t rank = x->shape.rank();
  std::vector<int64_t> to_last{0}, back{0, rank - 1};
  for (int64_t i = 2; i < rank; ++i) to_last.push_back(i);
  to_last.push_back(1);
  for (int64_t i = 1; i < rank - 1; ++i) back.push_back(i);
  Value* moved = ctx.emit("Transpose", {x}, {{"perm", Attribute::of_ints(to_last)}});
  Value* lp = ctx.emit("LogSoftmax", {moved}, {{"axis", Attribute::of_int(rank - 1)}});
  return ctx.emit("Transpose", {lp}, {{"perm", Attribute::of_ints(back)}});
}

void softmax_cross_entropy_grad(GradContext& ctx) {
  reject_weight_grad(ctx);
  if (!ctx.needs_input_grad(0)) return;
  const Node& n = ctx.node();
  Value* log_prob = log_prob_of(ctx);
  Value* dx = nullptr;
  if (Value* dloss = ctx.output_grad(0)) {
    std::vector<Value*> inputs{dloss, log_prob, ctx.input(1)};
    if (Value* w = ctx.input(2)) inputs.push_back(w);
    dx = ctx.emit("SoftmaxCrossEntropyLossGrad", inputs, loss_attrs(n), kTrainrtDomain);
  }
  if (Value* dlog_prob = ctx.output_grad(1)) {
    Value* d = ctx.emit("LogSoftmaxGrad", {dlog_prob, log_prob}, {{"axis", Attribute::of_int(1)}}, kTrainrtDomain);
    dx = dx ? ctx.emit("Add", {dx, d}) : d;
  }
  ctx.set_input_grad(0, dx);
}

void nll_grad(GradContext& ctx) {
  reject_weight_grad(ctx);
  if (!ctx.needs_input_grad(0)) return;
  Value* x = ctx.input(0);
  std::vector<Value*> inputs{ctx.output_grad(0), ctx.shape_of(x), ctx.input(1)};
  if (Value* w = ctx.input(2)) inputs.push_back(w);
  Value* dx = ctx.emit("NegativeLogLikelihoodLossGrad", inputs, loss_attrs(ctx.node()), kTrainrtDomain);
  dx->shape = x->shape;  // inference cannot see through Shape(X) when X has symbolic dims
  ctx.set_input_grad(0, dx);
}

}  // namespace

void register_loss_gradients(GradientRegistry& r) {
  r.add("", "SoftmaxCrossEntropyLoss", softmax_cross_entropy_grad);
  r.add("", "NegativeLogLikelihoodLoss", nll_grad);
}

}  // namespace trainrt
