#include "trainrt/optim/multi_tensor.h"

#include <algorithm>

#include "trainrt/core/error.h"

namespace trainrt {

namespace {
// Cuts inside a tensor land on multiples of this many elements (64 bytes of f32).
constexpr int64_t kCutAlignment = 16;
}  // namespace

MultiTensorPlan::MultiTensorPlan(std::span<const int64_t> numels, int64_t task_elements) {
  TRAINRT_CHECK(task_elements >= kCutAlignment, "task_elements = ", task_elements);
  task_starts_.push_back(0);
  int64_t fill = 0;  // elements in the task being packed
  auto close_task = [&] {
    task_starts_.push_back(static_cast<int64_t>(segments_.size()));
    fill = 0;
  };
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t n = numels[i];
    int64_t begin = 0;
    while (begin < n) {
      int64_t end = std::min(n, begin + (task_elements - fill));
      if (end < n) end -= end % kCutAlignment;  // keep the cut on a cache-line boundary
      if (end <= begin) {                       // too little room left in this task for a cut
        close_task();
        continue;
      }
      segments_.push_back({static_cast<int64_t>(i), begin, end});
      fill += end - begin;
      begin = end;
      if (fill >= task_elements) close_task();
    }
  }
  if (fill > 0) close_task();
}

}  // namespace trainrt
