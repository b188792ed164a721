// A dense, contiguous, row-major tensor: dtype, concrete dims and a data pointer.
//
// A Tensor either owns its storage (Tensor::empty / zeros, 64-byte aligned) or views memory owned
// elsewhere (an arena slot, a torch tensor via DLPack, an mmapped initializer). Copies share storage.
//
//   Tensor t = Tensor::empty(DType::kF32, {2, 3});   // (2, 3), uninitialized
//   float* p = t.data<float>();
//   Tensor v = Tensor::view(DType::kF32, {6}, p);    // same bytes, other shape, not owning
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/core/dtype.h"

namespace trainrt {

inline constexpr size_t kTensorAlignment = 64;

// 64-byte aligned heap storage; throws OutOfMemory naming the size on failure.
std::shared_ptr<void> aligned_storage(size_t nbytes);

// Bytes of aligned_storage (owned tensors, arenas, optimizer state) live now, and the most live at
// once since the last reset_storage_peak(): the engine's tensor memory, which torch's allocator
// and profiler do not see (benchmarks read it around a training step).
struct StorageBytes {
  size_t live = 0;
  size_t peak = 0;
};
StorageBytes storage_bytes();
void reset_storage_peak();  // peak := live

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(DType dtype, std::vector<int64_t> dims);
  static Tensor zeros(DType dtype, std::vector<int64_t> dims);
  static Tensor view(DType dtype, std::vector<int64_t> dims, void* data,
                     std::shared_ptr<void> owner = nullptr);
  // A 0-d tensor holding one value: Tensor::scalar<float>(2.f).
  template <typename T>
  static Tensor scalar(T value) {
    Tensor t = empty(dtype_of<T>(), {});
    *t.data<T>() = value;
    return t;
  }
  // A 1-d i64 tensor, the common form of shape-like inputs.
  static Tensor from_i64(const std::vector<int64_t>& values);

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same bytes, new dims with the same element count (no copy).
  Tensor reshaped(std::vector<int64_t> dims) const;
  // A deep copy into fresh owned storage.
  Tensor clone() const;
  // Rebinds this tensor to other memory and dims without reallocating the dims vector when the
  // rank is unchanged (used by the executor in steady state).
  void rebind(void* data, const std::vector<int64_t>& dims);
  // True when this tensor owns its storage and no other Tensor shares it: the storage may be
  // written again without anyone else seeing it (the executor reuses graph-output storage so).
  bool sole_owner() const { return owner_ && owner_.use_count() == 1; }

  // Reads element i converted to double / int64 (slow; for tests, shape inputs and printing).
  double to_double(int64_t i) const;
  int64_t to_i64(int64_t i) const;
  std::vector<int64_t> to_i64_vector() const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

std::string describe(const Tensor& t);  // "f32(2, 3)"

}  // namespace trainrt
