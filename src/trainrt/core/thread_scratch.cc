#include "trainrt/core/thread_scratch.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/tensor.h"

namespace trainrt {
namespace {

// One thread's buffers. Its mutex guards them against a release from another thread.
struct ThreadBuffers {
  std::mutex mutex;
  std::shared_ptr<void> buffers[kThreadScratchSlots];
  size_t sizes[kThreadScratchSlots] = {};
};

// Every live thread's buffers. Never destroyed: threads may end after static destructors ran.
struct Registry {
  std::mutex mutex;
  std::vector<ThreadBuffers*> threads;
};

Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

// Registers the thread's buffers on its first request and takes them out when the thread ends.
struct Registration {
  ThreadBuffers buffers;
  Registration() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.threads.push_back(&buffers);
  }
  ~Registration() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.threads.erase(std::find(r.threads.begin(), r.threads.end(), &buffers));
  }
};

}  // namespace

std::shared_ptr<void> thread_scratch(int slot, size_t bytes) {
  TRAINRT_CHECK(slot >= 0 && slot < kThreadScratchSlots, "thread scratch slot ", slot);
  thread_local Registration mine;
  ThreadBuffers& t = mine.buffers;
  if (bytes == 0) return nullptr;
  std::lock_guard lock(t.mutex);
  if (!t.buffers[slot] || bytes > t.sizes[slot]) {
    t.buffers[slot].reset();  // before the new one: the old bytes are not live twice
    t.buffers[slot] = aligned_storage(bytes);
    t.sizes[slot] = bytes;
  }
  return t.buffers[slot];
}

void release_thread_scratch() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (ThreadBuffers* t : r.threads) {
    std::lock_guard thread_lock(t->mutex);
    for (int s = 0; s < kThreadScratchSlots; ++s) {
      if (t->sizes[s] <= kThreadScratchKeptBytes) continue;
      t->buffers[s].reset();
      t->sizes[s] = 0;
    }
  }
}

}  // namespace trainrt
