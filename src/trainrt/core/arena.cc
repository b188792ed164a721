#include "trainrt/core/arena.h"

#include "trainrt/core/tensor.h"

namespace trainrt {

bool Arena::reserve(size_t bytes) {
  if (bytes <= capacity_ && block_) return false;
  block_ = aligned_storage(bytes);
  capacity_ = bytes;
  return true;
}

int64_t Arena::offset_of(const void* data) const {
  const auto* bytes = static_cast<const std::byte*>(data);
  const auto* base = static_cast<const std::byte*>(block_.get());
  if (!base || bytes < base || bytes >= base + capacity_) return -1;
  return bytes - base;
}

}  // namespace trainrt
