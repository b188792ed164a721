// The explicit list of gradient rule families (no static self-registration).
#pragma once

namespace trainrt {

class GradientRegistry;

void register_elementwise_gradients(GradientRegistry& r);  // arithmetic, activations, Where, Cast, ...
void register_matmul_gradients(GradientRegistry& r);       // MatMul, Gemm
void register_reduction_gradients(GradientRegistry& r);    // Reduce*, Softmax, LayerNorm, losses
void register_tensor_gradients(GradientRegistry& r);       // movement ops, Gather, Dropout, shape ops
void register_conv_gradients(GradientRegistry& r);         // Conv
void register_pool_gradients(GradientRegistry& r);         // MaxPool, AveragePool, Global*Pool
void register_attention_gradients(GradientRegistry& r);    // ScaledDotProductAttention
void register_python_op_gradients(GradientRegistry& r);    // PythonOp: the user's backward
void register_spectral_gradients(GradientRegistry& r);     // DFT
void register_control_flow_gradients(GradientRegistry& r);  // If (its branches' own joint graphs)

inline void register_all_gradients(GradientRegistry& r) {
  register_elementwise_gradients(r);
  register_matmul_gradients(r);
  register_reduction_gradients(r);
  register_tensor_gradients(r);
  register_conv_gradients(r);
  register_pool_gradients(r);
  register_attention_gradients(r);
  register_python_op_gradients(r);
  register_spectral_gradients(r);
  register_control_flow_gradients(r);
}

}  // namespace trainrt
