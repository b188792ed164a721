// Choices about what the forward keeps for the backward, made on the joint graph (forward and
// backward nodes from build_gradients) before partition_joint_graph splits it.
//
// The saved set is every forward value the backward reads. Local rewrites make it smaller or
// cheaper to produce, and never larger:
//   0. Checkpointed regions (torch.utils.checkpoint at capture, and the transformer layers that
//      TRAINRT_MEMORY_OPT_LEVEL 1 or 2 asks for: layer_recompute.h): the values made inside one are
//      recomputed in the backward from the region's inputs (checkpoint_recompute.h); run after
//      rule 1, so that a Shape of such a value stays a forward read of its dims.
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
//   3. A cheap pointwise op whose input the backward reads anyway (so it is saved) and whose output
//      the backward also reads is run again in the backward on that input, and only the input is
//      saved: the Inductor / functorch min-cut partitioner's rule of recomputing cheap pointwise
//      ops instead of saving both ends (never random ops or GEMMs). In a GPT-2 MLP block the GELU
//      gradient reads fc's output X (B, T, 4C) and the out-projection's weight gradient reads
//      Gelu(X) (B, T, 4C): one (B, T, 4C) saved instead of two, for one GELU pass in the backward.
//      The recompute is placed just before its first backward reader, where the schedule runs it.
//      A widening Cast (bf16 -> f32) is recomputed even when its input was not saved: the input has
//      fewer bytes (under bf16 autocast the batch norm's gradient reads the f32 cast of a bf16 Conv
//      output; the bf16 output is saved instead, half the bytes).
//   4. Relu(BatchNormalization(X)) in training mode, where the batch norm's gradient reads X (saved)
//      and the backward also reads the Relu's output R: the backward runs both again on X, and only
//      X is saved. In a ResNet BasicBlock, Conv -> BN -> ReLU -> Conv saves the first Conv's
//      output and the ReLU's: one (N, C, H, W) instead of two, for one batch-norm pass.
//   5. P = MaxPool(R), R = Relu(Y), R read by the backward only in MaxPoolGrad and ReluGrad: the
//      forward writes the windows' u8 argmax beside P (MaxPoolWithArgmax) and the backward runs
//      MaxPoolArgmaxGrad(ReluGrad(dP, P), argmax): the same bits without R (ReLU and max pooling
//      commute). A CNN stem (Conv -> BN -> ReLU -> MaxPool 2x2) saves argmax (R's f32 bytes / 16)
//      instead of R.
//   6. A row selection Gather(X, rows) along axis 0 whose inputs the backward reads at no cost (the
//      caller's input and label sparsity's rows, forward inputs) is run again in the backward: an
//      MLP under label sparsity saved a copy of its input batch for the first weight gradient. With
//      every row selected (no label ignored) the selection is no copy at all, in either program
//      (the planner shows X itself: PlanOptions::row_selections).
//   7. The classification loss's gradient through the model's head (dScores, then dh = dScores W
//      and the weight's gradient), linear in the loss's output gradient dL, is made in the forward
//      for dL = 1 and scaled by dL in the backward, where that saves bytes: a language model saves
//      dh (tokens, hidden) instead of its log-probabilities (tokens, vocabulary)
//      (loss_gradient_in_forward.h). Run after rule 2, whose log_prob it reads.
//
//   GradientResult grads = build_gradients(*joint, request);
//   SavedValueChoices made = choose_saved_values(*joint, grads);  // edits joint, grads.forward_nodes
//   TrainingPrograms p = partition_joint_graph(*joint, grads);
#pragma once

#include <map>
#include <set>
#include <string>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

struct SavedValueChoices {
  int shapes_moved_to_forward = 0;  // Shape / Size nodes now in the forward
  int log_probs_kept = 0;           // loss nodes now writing log_prob for their gradient
  int pointwise_recomputed = 0;     // pointwise outputs recomputed in the backward, not saved
  int batch_norms_recomputed = 0;   // Relu(BatchNormalization(X)) recomputed from X, not saved
  int pools_by_argmax = 0;          // MaxPool(Relu(.)) whose gradient reads an argmax, not the ReLU output
  int checkpoint_recomputed = 0;    // forward nodes of checkpointed regions copied into the backward
  int row_selections_recomputed = 0;  // row selections of free inputs made again in the backward
  int loss_gradients_in_forward = 0;  // loss gradients through the head made in the forward (rule 7)
};

// `recompute_regions`: forward node name -> region (rule 0: checkpointed blocks, and the layers a memory
// level picks, layer_recompute.h); `kept`: region nodes whose outputs are saved. Empty: no rule 0.
SavedValueChoices choose_saved_values(Graph& joint, GradientResult& gradients,
                                      const std::map<std::string, int>& recompute_regions = {},
                                      const std::set<std::string>& kept = {});

}  // namespace trainrt
