#include "trainrt/kernels/cpu/cpu_kernels.h"

#include "trainrt/kernels/cpu/host_kernels.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

KernelTable& table() {
  static KernelTable table = [] {
    KernelTable t;
    register_cpu_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace

const KernelTable& cpu_kernel_table() { return table(); }

void add_host_kernel(std::string_view domain, std::string_view op, DType dtype, KernelFactory factory) {
  table().add(domain, op, dtype, factory);
}

}  // namespace trainrt
