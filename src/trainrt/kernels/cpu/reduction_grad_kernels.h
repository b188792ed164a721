// The CPU kernels of the reduction family's TrainRT-domain gradient ops, one file per op group;
// register_reduction_grad_kernels (cpu_kernels.h) registers them all through these.
//
//   softmax_grad_kernels.cc     SoftmaxGrad, LogSoftmaxGrad
//   layer_norm_grad_kernels.cc  LayerNormalizationGrad
//   loss_grad_kernels.cc        SoftmaxCrossEntropyLossGrad, NegativeLogLikelihoodLossGrad
#pragma once

namespace trainrt {

class KernelTable;

void register_softmax_grad_kernels(KernelTable& t);
void register_layer_norm_grad_kernels(KernelTable& t);
void register_loss_grad_kernels(KernelTable& t);

}  // namespace trainrt
