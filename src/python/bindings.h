// Pieces of the trainrt._C module, one function per area.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "trainrt/core/tensor.h"

namespace trainrt::python {

void bind_errors(nanobind::module_& m);
void bind_session(nanobind::module_& m);
void bind_training(nanobind::module_& m);
void bind_module_programs(nanobind::module_& m);
void bind_optim(nanobind::module_& m);
void bind_python_op(nanobind::module_& m);  // PythonOp's kernels and their Python callbacks

// Zero-copy views between DLPack-capable arrays (numpy, torch) and engine tensors.
using AnyArray = nanobind::ndarray<nanobind::ro, nanobind::device::cpu>;  // read-only arrays too
// `as_bf16` reads a uint16 array as bfloat16 bits (numpy has no bfloat16 dtype).
Tensor tensor_from_array(const AnyArray& array, const char* what, bool as_bf16 = false);
// Hands an engine tensor to numpy without copying; the array keeps the storage alive. bf16 comes
// out as a uint16 array of the same bits.
nanobind::object array_from_tensor(Tensor t);
// Hands an engine tensor to torch without copying: a DLPack capsule for torch.from_dlpack (bf16 as
// bfloat16). Unlike a numpy array's, the tensor torch makes of it is freed without the GIL.
nanobind::object capsule_from_tensor(Tensor t);

}  // namespace trainrt::python
