// The CPU kernels of FusedMatMul (TrainRT domain, ops/fused_matmul_schemas.h): Y = alpha *
// op(A) @ op(B) with the last two axes transposed where transA / transB say, batch dims broadcast
// as numpy does. f32 and bf16 run on oneDNN (gemm.h; bf16 sums in f32); f64 and f16 on a row loop
// accumulating in f64 / f32. register_elementwise_grad_kernels (cpu_kernels.h) registers them.
//
//   KernelTable t;
//   register_fused_matmul_kernels(t);   // ("com.trainrt", "FusedMatMul", f32 / f64 / f16 / bf16)
#pragma once

namespace trainrt {

class KernelTable;

void register_fused_matmul_kernels(KernelTable& t);

}  // namespace trainrt
