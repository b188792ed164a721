// DLPack <-> Tensor conversion without copies.
#include <nanobind/ndarray.h>

#include <vector>

#include "bindings.h"
#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

DType dtype_from_dlpack(nb::dlpack::dtype t) {
  using nb::dlpack::dtype_code;
  auto code = static_cast<dtype_code>(t.code);
  if (t.lanes != 1) return DType::kUndefined;
  if (code == dtype_code::Float && t.bits == 32) return DType::kF32;
  if (code == dtype_code::Float && t.bits == 64) return DType::kF64;
  if (code == dtype_code::Float && t.bits == 16) return DType::kF16;
  if (code == dtype_code::Bfloat && t.bits == 16) return DType::kBF16;
  if (code == dtype_code::Int && t.bits == 64) return DType::kI64;
  if (code == dtype_code::Int && t.bits == 32) return DType::kI32;
  if (code == dtype_code::Int && t.bits == 8) return DType::kI8;
  if (code == dtype_code::UInt && t.bits == 8) return DType::kU8;
  if (code == dtype_code::Bool && t.bits == 8) return DType::kBool;
  return DType::kUndefined;
}

// `numpy_bf16`: numpy has no bfloat16, so arrays for numpy carry bf16 as uint16 bits; DLPack
// capsules for torch carry it as bfloat16.
nb::dlpack::dtype dlpack_from_dtype(DType t, bool numpy_bf16 = true) {
  using nb::dlpack::dtype_code;
  auto make = [](dtype_code c, int bits) {
    nb::dlpack::dtype d;
    d.code = static_cast<uint8_t>(c);
    d.bits = static_cast<uint8_t>(bits);
    d.lanes = 1;
    return d;
  };
  switch (t) {
    case DType::kF32: return make(dtype_code::Float, 32);
    case DType::kF64: return make(dtype_code::Float, 64);
    case DType::kF16: return make(dtype_code::Float, 16);
    case DType::kBF16: return make(numpy_bf16 ? dtype_code::UInt : dtype_code::Bfloat, 16);
    case DType::kI64: return make(dtype_code::Int, 64);
    case DType::kI32: return make(dtype_code::Int, 32);
    case DType::kI8: return make(dtype_code::Int, 8);
    case DType::kU8: return make(dtype_code::UInt, 8);
    case DType::kBool: return make(dtype_code::Bool, 8);
    case DType::kUndefined: break;
  }
  throw InternalError("tensor without dtype");
}

// DLPack's DLManagedTensor (dlpack.h, the unversioned ABI torch.from_dlpack takes from a capsule
// named "dltensor").
struct ManagedTensor {
  nb::dlpack::dltensor dl;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};

// What a capsule owns: the engine tensor (a reference on its storage) and the shape DLPack points at.
struct CapsuleOwner {
  ManagedTensor managed;
  Tensor tensor;
  std::vector<int64_t> shape;
};

// Plain C++, no Python: torch may free its tensor on any thread (gloo's workers, the autograd
// engine's), also while the interpreter shuts down, when taking the GIL would end that thread.
void release_owner(ManagedTensor* m) { delete static_cast<CapsuleOwner*>(m->manager_ctx); }

// A capsule nobody consumed still owns its tensor; torch renames the ones it consumed.
void release_unconsumed_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  m->deleter(m);
}

}  // namespace

Tensor tensor_from_array(const AnyArray& a, const char* what, bool as_bf16) {
  DType dtype = dtype_from_dlpack(a.dtype());
  // numpy has no bfloat16: the Python layer passes bf16 data as a uint16 view and says so.
  if (as_bf16 && a.dtype().code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt) && a.dtype().bits == 16)
    dtype = DType::kBF16;
  if (dtype == DType::kUndefined)
    throw UnsupportedOp(fmt(what, ": unsupported array dtype (code ", int(a.dtype().code), ", ",
                            int(a.dtype().bits), " bits)"));
  std::vector<int64_t> dims(a.ndim());
  int64_t expected_stride = 1;
  bool contiguous = true;
  for (size_t i = a.ndim(); i-- > 0;) {
    dims[i] = static_cast<int64_t>(a.shape(i));
    if (dims[i] != 1 && a.stride(i) != expected_stride) contiguous = false;
    expected_stride *= dims[i];
  }
  if (expected_stride == 0) contiguous = true;  // an empty array has no layout to get wrong
  if (!contiguous)
    throw ShapeError(fmt(what, ": array of shape ", to_string(dims),
                         " is not C-contiguous; pass a contiguous array (numpy.ascontiguousarray or "
                         "tensor.contiguous())"));
  return Tensor::view(dtype, std::move(dims), const_cast<void*>(a.data()));
}

nb::object array_from_tensor(Tensor t) {
  auto* owner = new Tensor(std::move(t));
  nb::capsule deleter(owner, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owner->dims().begin(), owner->dims().end());
  nb::ndarray<nb::numpy> array(owner->raw(), shape.size(), shape.data(), deleter, nullptr,
                                dlpack_from_dtype(owner->dtype()));
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object capsule_from_tensor(Tensor t) {
  auto* owner = new CapsuleOwner{{}, std::move(t), {}};
  owner->shape.assign(owner->tensor.dims().begin(), owner->tensor.dims().end());
  nb::dlpack::dltensor& dl = owner->managed.dl;
  dl.data = owner->tensor.raw();
  dl.device.device_type = 1;  // kDLCPU
  dl.ndim = static_cast<int32_t>(owner->shape.size());
  dl.dtype = dlpack_from_dtype(owner->tensor.dtype(), /*numpy_bf16=*/false);
  dl.shape = owner->shape.data();
  dl.strides = nullptr;  // compact, row-major
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = release_owner;
  PyObject* capsule = PyCapsule_New(&owner->managed, "dltensor", release_unconsumed_capsule);
  if (!capsule) {
    delete owner;
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

}  // namespace trainrt::python
