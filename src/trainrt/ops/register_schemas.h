// The explicit list of op families whose schemas TrainRT registers (no static self-registration).
#pragma once

namespace trainrt {

class OpRegistry;

void register_elementwise_schemas(OpRegistry& r);  // unary, binary, compare, logical, Cast, Clip, ...
void register_reduction_schemas(OpRegistry& r);    // Reduce*, Softmax, LogSoftmax, norms, losses
void register_matmul_schemas(OpRegistry& r);       // MatMul, Gemm, Einsum
void register_einsum_schema(OpRegistry& r);        // (called by register_matmul_schemas)
void register_tensor_schemas(OpRegistry& r);       // shape and data movement, Constant, Dropout, ...
void register_conv_schemas(OpRegistry& r);         // Conv and its gradient ConvGrad
// TrainRT-domain gradient ops used by the autodiff (ReluGrad, SoftmaxGrad, GatherGrad, ...).
void register_elementwise_grad_schemas(OpRegistry& r);
void register_reduction_grad_schemas(OpRegistry& r);
void register_tensor_grad_schemas(OpRegistry& r);
void register_batch_norm_schemas(OpRegistry& r);  // BatchNormalization and its gradient op
void register_pool_schemas(OpRegistry& r);        // MaxPool, AveragePool, Global*Pool and their gradient ops
void register_attention_schemas(OpRegistry& r);  // ScaledDotProductAttention and its Grad
void register_python_op_schemas(OpRegistry& r);  // PythonOp and PythonOpGrad: a user's autograd.Function
void register_fused_elementwise_schema(OpRegistry& r);  // FusedElementwise: elementwise subgraphs as one op
void register_control_flow_schemas(OpRegistry& r);      // If, Loop, Scan: ops with bodies
// LinearSoftmaxCrossEntropy: a head's product, its loss and the loss's gradients, by row blocks
void register_linear_cross_entropy_schema(OpRegistry& r);
void register_random_schemas(OpRegistry& r);            // RandomUniform(Like), RandomNormal(Like), Bernoulli

inline void register_all_schemas(OpRegistry& r) {
  register_elementwise_schemas(r);
  register_reduction_schemas(r);
  register_matmul_schemas(r);
  register_tensor_schemas(r);
  register_conv_schemas(r);
  register_elementwise_grad_schemas(r);
  register_reduction_grad_schemas(r);
  register_tensor_grad_schemas(r);
  register_batch_norm_schemas(r);
  register_pool_schemas(r);
  register_attention_schemas(r);
  register_python_op_schemas(r);
  register_fused_elementwise_schema(r);
  register_control_flow_schemas(r);
  register_random_schemas(r);
  register_linear_cross_entropy_schema(r);
}

}  // namespace trainrt
