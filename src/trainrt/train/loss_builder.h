// Appends a training loss to a model graph: the graph gains a label input and a scalar loss.
//
//   cross_entropy: SoftmaxCrossEntropyLoss(output (N, C[, d...]), label (N[, d...]) int64), mean
//   mse:           ReduceMean((output - label)^2) over every element, label shaped like output
//
//   std::string loss = append_loss(graph, LossKind::kCrossEntropy, "logits", "label");
#pragma once

#include <string>
#include <string_view>

#include "trainrt/ir/graph.h"

namespace trainrt {

enum class LossKind { kCrossEntropy, kMse };

// Parses "cross_entropy" / "mse"; throws InvalidModel listing the choices otherwise.
LossKind parse_loss_kind(std::string_view name);

// Returns the name of the new scalar loss value. `label` becomes a new graph input; throws
// InvalidModel when `output` is not a floating-point value of the graph or `label` is taken.
std::string append_loss(Graph& graph, LossKind kind, const std::string& output, const std::string& label);

}  // namespace trainrt
