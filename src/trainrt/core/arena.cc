#include "trainrt/core/arena.h"

#include "trainrt/core/tensor.h"

namespace trainrt {

bool Arena::reserve(size_t bytes) {
  if (bytes <= capacity_ && block_) return false;
  block_ = aligned_storage(bytes);
  capacity_ = bytes;
  return true;
}

}  // namespace trainrt
