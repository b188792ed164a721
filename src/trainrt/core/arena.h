// One 64-byte aligned block of memory that a plan carves into buffers by offset.
//
// The planner decides offsets; the arena only owns the bytes and grows (never shrinks) when a
// plan for a larger shape signature needs more. Growing invalidates earlier pointers, so a session
// re-binds its plan after reserve().
//
//   Arena arena;
//   arena.reserve(plan.arena_bytes);
//   float* x = arena.at<float>(plan.offset_of(value));   // (B, T, C)
#pragma once

#include <cstddef>
#include <memory>

namespace trainrt {

class Arena {
 public:
  // Ensures at least `bytes` bytes; returns true when the block moved.
  bool reserve(size_t bytes);
  size_t capacity() const { return capacity_; }
  std::byte* base() { return static_cast<std::byte*>(block_.get()); }
  template <typename T>
  T* at(size_t offset) {
    return reinterpret_cast<T*>(base() + offset);
  }

 private:
  std::shared_ptr<void> block_;
  size_t capacity_ = 0;
};

}  // namespace trainrt
