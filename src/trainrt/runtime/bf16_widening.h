// widen_bf16_without_kernel: runs in f32 the nodes that read bf16 (or f16) but have no kernel of
// that dtype, through autodiff/low_precision.h's compute_in_f32.
//
// Under mixed precision the capture hands bf16 values from op to op as eager torch.autocast does
// (python/trainrt/capture/autocast.py), and autodiff gives their gradients the same dtypes. A node
// whose kernel key dtype (KernelTable::key_dtype, its first input's) is bf16 and which the kernel
// table has no bf16 kernel for gets, instead of an UnsupportedOp at planning:
//   each bf16 input  -> Cast(to=f32) (one per value, shared by the widened nodes reading it),
//   each bf16 output <- Cast(to=bf16) of the node's now-f32 output,
// so every other node sees the dtypes the graph had. The result is what the op computes on the
// widened values, rounded once to bf16: torch's bf16 CPU kernels compute in f32 inside too.
// The same holds for f16. Idempotent (a widened node reads f32). Which ops were widened is logged at
// verbose level.
//
//   std::vector<std::string> ops = widen_bf16_without_kernel(graph, cpu_kernel_table());
#pragma once

#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

// Rewrites `graph` in place; returns the names of the widened nodes, in topological order.
std::vector<std::string> widen_bf16_without_kernel(Graph& graph, const KernelTable& kernels);

}  // namespace trainrt
