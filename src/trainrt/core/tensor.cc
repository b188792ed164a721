#include "trainrt/core/tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {
namespace {

std::atomic<size_t> g_live_bytes{0};
std::atomic<size_t> g_peak_bytes{0};

void raise_peak(size_t live) {
  size_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::shared_ptr<void> aligned_storage(size_t nbytes) {
  size_t rounded = (nbytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  if (!p) throw OutOfMemory(fmt("could not allocate ", nbytes, " bytes for a tensor"));
  raise_peak(g_live_bytes.fetch_add(rounded, std::memory_order_relaxed) + rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    std::free(q);
    g_live_bytes.fetch_sub(rounded, std::memory_order_relaxed);
  });
}

StorageBytes storage_bytes() {
  return {g_live_bytes.load(std::memory_order_relaxed), g_peak_bytes.load(std::memory_order_relaxed)};
}

void reset_storage_peak() { g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

static int64_t checked_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw ShapeError(fmt("negative dimension in shape ", to_string(dims)));
    if (d != 0 && n > INT64_MAX / d) throw ShapeError(fmt("shape ", to_string(dims), " overflows"));
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = checked_numel(dims);
  t.dims_ = std::move(dims);
  t.owner_ = aligned_storage(t.nbytes());
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> dims) {
  Tensor t = empty(dtype, std::move(dims));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> dims, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = checked_numel(dims);
  t.dims_ = std::move(dims);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::from_i64(const std::vector<int64_t>& values) {
  Tensor t = empty(DType::kI64, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 8);
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  int64_t n = checked_numel(dims);
  if (n != numel_)
    throw ShapeError(fmt("cannot view ", describe(*this), " as ", to_string(dims)));
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, dims_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::rebind(void* data, const std::vector<int64_t>& dims) {
  data_ = data;
  if (&dims == &dims_) return;  // same shape, new storage (vector::assign must not read from itself)
  dims_.assign(dims.begin(), dims.end());
  numel_ = numel_of(dims_);
}

double Tensor::to_double(int64_t i) const {
  return visit_dtype(dtype_, [&]<typename T>() -> double {
    const T v = static_cast<const T*>(data_)[i];
    if constexpr (std::is_same_v<T, Half>) return f16_to_f32(v.bits);
    else if constexpr (std::is_same_v<T, BFloat16>) return bf16_to_f32(v.bits);
    else return static_cast<double>(v);
  });
}

int64_t Tensor::to_i64(int64_t i) const {
  if (dtype_ == DType::kI64) return static_cast<const int64_t*>(data_)[i];
  if (dtype_ == DType::kI32) return static_cast<const int32_t*>(data_)[i];
  return static_cast<int64_t>(to_double(i));
}

std::vector<int64_t> Tensor::to_i64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = to_i64(i);
  return out;
}

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + to_string(t.dims());
}

}  // namespace trainrt
