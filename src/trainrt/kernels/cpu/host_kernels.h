// Kernels that a layer above the engine provides, added to the CPU kernel table at start-up.
//
// The binding layer registers PythonOp / PythonOpGrad this way (src/python/python_op_bindings.cc):
// their kernels call back into Python, which no engine layer may include. Add them before the
// first session is built; the table is not locked against sessions planning meanwhile.
//
//   add_host_kernel(kTrainrtDomain, "PythonOp", DType::kUndefined, make_python_op);
#pragma once

#include <string_view>

#include "trainrt/kernels/kernel.h"

namespace trainrt {

void add_host_kernel(std::string_view domain, std::string_view op, DType dtype, KernelFactory factory);

}  // namespace trainrt
