// The gradient rule files of the reduction family; register_reduction_gradients
// (register_gradients.h, defined in reduction_gradients.cc with the Reduce* rules) calls these.
//
//   normalization_gradients.cc  Softmax, LogSoftmax, LayerNormalization
//   loss_gradients.cc           SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss
#pragma once

namespace trainrt {

class GradientRegistry;

void register_normalization_gradients(GradientRegistry& r);
void register_loss_gradients(GradientRegistry& r);

}  // namespace trainrt
