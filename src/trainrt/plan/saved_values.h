// Choices about what the forward keeps for the backward, made on the joint graph (forward and
// backward nodes from build_gradients) before partition_joint_graph splits it.
//
// The saved set is every forward value the backward reads. Two local rewrites make it smaller or
// cheaper to produce, and never larger:
//   1. Shape and Size nodes of the backward that read a forward value move to the forward. The
//      gradients of Reshape, Flatten and friends read only their input's shape; the backward then
//      keeps a few int64s instead of the whole tensor alive (and the forward planner folds them
//      to constants when the shape is static).
//   2. The LogSoftmax(scores) along axis 1 that the SoftmaxCrossEntropyLoss gradient recomputes in
//      the backward, when the backward reads scores for nothing else and scores is no graph
//      output: the loss node writes its optional log_prob output instead (ONNX
//      SoftmaxCrossEntropyLoss output 1, the same values) and the backward reads that. The loss
//      kernel has the log-sum-exp already, so log_prob costs one subtraction pass; the recompute
//      cost a log-sum-exp pass and that subtraction. The saved bytes do not change: log_prob
//      replaces scores.
//
//   GradientResult grads = build_gradients(*joint, request);
//   SavedValueChoices made = choose_saved_values(*joint, grads);  // edits joint, grads.forward_nodes
//   TrainingPrograms p = partition_joint_graph(*joint, grads);
#pragma once

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

struct SavedValueChoices {
  int shapes_moved_to_forward = 0;  // Shape / Size nodes now in the forward
  int log_probs_kept = 0;           // loss nodes now writing log_prob for their gradient
};

SavedValueChoices choose_saved_values(Graph& joint, GradientResult& gradients);

}  // namespace trainrt
