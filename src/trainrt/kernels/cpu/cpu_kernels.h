// The CPU kernel families, registered explicitly into a KernelTable.
//
//   KernelTable table;
//   register_cpu_kernels(table);
#pragma once

namespace trainrt {

class KernelTable;

void register_elementwise_kernels(KernelTable& t);
void register_reduction_kernels(KernelTable& t);
void register_matmul_kernels(KernelTable& t);
void register_einsum_kernels(KernelTable& t);  // called by register_matmul_kernels
void register_tensor_kernels(KernelTable& t);
void register_conv_kernels(KernelTable& t);  // Conv on oneDNN
// TrainRT-domain gradient ops used by the autodiff.
void register_elementwise_grad_kernels(KernelTable& t);
void register_reduction_grad_kernels(KernelTable& t);
void register_tensor_grad_kernels(KernelTable& t);
void register_conv_grad_kernels(KernelTable& t);
void register_batch_norm_kernels(KernelTable& t);  // BatchNormalization and BatchNormalizationGrad
void register_instance_norm_kernels(KernelTable& t);  // InstanceNormalization[Grad], by the above
void register_pool_kernels(KernelTable& t);        // MaxPool, AveragePool, Global*Pool and their gradients
void register_attention_kernels(KernelTable& t);  // ScaledDotProductAttention and its Grad

inline void register_cpu_kernels(KernelTable& t) {
  register_elementwise_kernels(t);
  register_reduction_kernels(t);
  register_matmul_kernels(t);
  register_tensor_kernels(t);
  register_conv_kernels(t);
  register_elementwise_grad_kernels(t);
  register_reduction_grad_kernels(t);
  register_tensor_grad_kernels(t);
  register_conv_grad_kernels(t);
  register_batch_norm_kernels(t);
  register_pool_kernels(t);
  register_attention_kernels(t);
}

// The process-wide table with every CPU kernel, built on first use.
const KernelTable& cpu_kernel_table();

}  // namespace trainrt
