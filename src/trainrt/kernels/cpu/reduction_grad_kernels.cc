#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {

void register_reduction_grad_kernels(KernelTable& t) {}

}  // namespace trainrt
