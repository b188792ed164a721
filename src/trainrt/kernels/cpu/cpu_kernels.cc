#include "trainrt/kernels/cpu/cpu_kernels.h"

#include "trainrt/kernels/kernel.h"

namespace trainrt {

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    register_cpu_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace trainrt
