// Splits the elements of many tensors into balanced tasks for the thread pool.
//
// Optimizer steps and gradient norms touch every element of every parameter once, and parameter
// sizes range from a bias of 8 elements to an embedding of 50M. A MultiTensorPlan cuts large
// tensors into pieces and packs small tensors together, so every task holds about
// kTaskElements elements and the pool's equal-count split of tasks is an equal split of work.
// Piece boundaries inside a tensor fall on 16-element (64-byte) multiples, so two threads never
// write the same cache line of a 64-byte-aligned tensor.
//
//   MultiTensorPlan plan({1000, 3, 5'000'000});                  // numel of each tensor
//   plan.run([&](int64_t task, const TensorSegment& s) {         // s: elements [begin, end)
//     scale(data[s.tensor] + s.begin, s.end - s.begin, 0.5f);    //    of tensor s.tensor
//   });
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainrt/core/thread_pool.h"

namespace trainrt {

// Elements [begin, end) of tensor number `tensor`.
struct TensorSegment {
  int64_t tensor;
  int64_t begin;
  int64_t end;
};

class MultiTensorPlan {
 public:
  // 64K elements: 256 KiB of each f32 array a step streams, long enough to amortize a task's
  // start, short enough that 124M parameters give ~1900 tasks to balance over the threads.
  static constexpr int64_t kTaskElements = 64 * 1024;

  explicit MultiTensorPlan(std::span<const int64_t> numels, int64_t task_elements = kTaskElements);

  int64_t num_tasks() const { return static_cast<int64_t>(task_starts_.size()) - 1; }
  std::span<const TensorSegment> task(int64_t t) const {
    return std::span<const TensorSegment>(segments_).subspan(
        static_cast<size_t>(task_starts_[static_cast<size_t>(t)]),
        static_cast<size_t>(task_starts_[static_cast<size_t>(t) + 1] - task_starts_[static_cast<size_t>(t)]));
  }

  // All segments, task by task in order: results kept per segment (indexed by index_of) and then
  // combined in this order do not depend on thread timing.
  int64_t num_segments() const { return static_cast<int64_t>(segments_.size()); }
  const TensorSegment& segment(int64_t i) const { return segments_[static_cast<size_t>(i)]; }
  // The index of a segment handed out by task() or run().
  int64_t index_of(const TensorSegment& s) const { return &s - segments_.data(); }

  // Calls fn(task_index, segment) for every segment; tasks run in parallel on
  // ThreadPool::global(), the segments of one task in order on one thread.
  template <typename Fn>
  void run(Fn&& fn) const {
    ThreadPool::global().parallel_for(num_tasks(), 1, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t)
        for (const TensorSegment& s : task(t)) fn(t, s);
    });
  }

 private:
  std::vector<TensorSegment> segments_;
  std::vector<int64_t> task_starts_;  // task t is segments_[task_starts_[t], task_starts_[t + 1])
};

}  // namespace trainrt
