// One 64-byte aligned block of memory that a plan carves into buffers by offset.
//
// The planner decides offsets; the arena only owns the bytes and grows (never shrinks) when a
// plan for a larger shape signature needs more. Growing invalidates earlier pointers, so a session
// re-binds its plan after reserve().
//
// A run may hand some of its results over in the arena's bytes (a forward's saved values, which
// its backward reads there: SessionOptions::arena_outputs). Each such tensor keeps the block alive
// through `block()`, so while the caller holds one the block is in use elsewhere: a run that does
// not read those bytes detach()es the block and gets a fresh one, never writing over them.
//
//   Arena arena;
//   arena.reserve(plan.arena_bytes);
//   float* x = arena.at<float>(plan.offset_of(value));   // (B, T, C)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace trainrt {

class Arena {
 public:
  // Ensures at least `bytes` bytes; returns true when the block moved.
  bool reserve(size_t bytes);
  size_t capacity() const { return capacity_; }
  std::byte* base() { return static_cast<std::byte*>(block_.get()); }
  // The owner a tensor handed over in the arena's bytes holds (Tensor::view's `owner`).
  const std::shared_ptr<void>& block() const { return block_; }
  // Whether tensors handed over in these bytes are still held somewhere.
  bool in_use_elsewhere() const { return block_ && block_.use_count() > 1; }
  // Bytes from the base to `data`, or -1 when `data` is not in this block.
  int64_t offset_of(const void* data) const;
  // Leaves the block to those who hold tensors in it; the next reserve() allocates a new one.
  void detach() {
    block_.reset();
    capacity_ = 0;
  }
  template <typename T>
  T* at(size_t offset) {
    return reinterpret_cast<T*>(base() + offset);
  }

 private:
  std::shared_ptr<void> block_;
  size_t capacity_ = 0;
};

}  // namespace trainrt
