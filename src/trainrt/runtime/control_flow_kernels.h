// Kernels of ONNX If, Loop and Scan (ops/control_flow_args.h): each runs its body in a Session of
// its own, planned per body input signature like any graph, on the caller's threads.
//
// They live in the runtime layer because they run Sessions; runtime_kernel_table() is the table a
// Session uses by default: the engine's (CPU kernels and generated ones) with these added.
//
//   Session session(import_onnx("loop.onnx"));   // its table is runtime_kernel_table()
//   std::vector<Tensor> out = session.run({trip_count, cond, y});
//
// Outputs the plan could size (static dims) are copied into; the others are the body session's
// own result storage, handed over (OpSchema::sizes_outputs_when_run). Loop's and Scan's scan
// outputs are stacked after the last iteration. A body's error is rethrown naming the node.
#pragma once

#include "trainrt/kernels/kernel.h"

namespace trainrt {

const KernelTable& runtime_kernel_table();

}  // namespace trainrt
