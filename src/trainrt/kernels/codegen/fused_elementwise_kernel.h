// The kernel of FusedElementwise (ops/fused_elementwise_schema.cc): the body's generated function
// (elementwise_source.h, compiled by compiler.h) run over the output in runs of elements, with
// each input's broadcast resolved per run; or, where no generated function could be had, the
// body's ops one after another through the CPU kernels (the reference the tests compare with).
//
// The output is walked as (rows, cols): cols is the product of the longest run of trailing dims
// along which every input either varies with the output or is broadcast; an input that varies
// is read in place, one that is broadcast is repeated into a small per-thread buffer. Runs are
// at most kRun elements, split over the pool's threads.
//
// engine_kernel_table() is the table sessions use: the CPU kernel table, this kernel added to it.
//
//   const KernelTable& table = engine_kernel_table();
#pragma once

#include "trainrt/kernels/kernel.h"

namespace trainrt {

void register_codegen_kernels(KernelTable& table);
const KernelTable& engine_kernel_table();

}  // namespace trainrt
