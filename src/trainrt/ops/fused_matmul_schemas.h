// FusedMatMul (TrainRT domain): a batched matrix product with transposes and a scale folded in,
// so the MatMul gradient needs no Transpose nodes (as ONNX Runtime's com.microsoft FusedMatMul).
//
//   Y = alpha * op(A) @ op(B) [+ bias],  op(X) = X, or X with its last two axes swapped when trans = 1
//   bias (N), optional third input, added to every row (a Linear layer's bias: passes/matmul_bias_fusion.h)
//   A (..., M, K), or (..., K, M) with transA = 1;  B (..., K, N), or (..., N, K) with transB = 1
//   Y (broadcast(A's batch dims, B's batch dims), M, N)     numpy broadcasting of the batch dims
// Both inputs have rank >= 2 and one float dtype (f32, f64, f16, bf16). Attributes: transA,
// transB (int, default 0), alpha (float, default 1).
//
//   // dA of A (B, M, K) @ W (K, N) from dY (B, M, N): dY @ W^T, without transposing W
//   Node* n = g.add_node("FusedMatMul", {dy, w}, {"dA"}, kTrainrtDomain);
//   n->set_attr("transB", Attribute::of_int(1));
#pragma once

namespace trainrt {

class OpRegistry;

// Registered by register_elementwise_grad_schemas (register_schemas.h).
void register_fused_matmul_schemas(OpRegistry& r);

}  // namespace trainrt
