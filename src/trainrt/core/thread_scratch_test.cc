#include "trainrt/core/thread_scratch.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

#include "trainrt/core/error.h"
#include "trainrt/core/tensor.h"

namespace trainrt {
namespace {

constexpr size_t kLarge = kThreadScratchKeptBytes + 4096;

TEST(ThreadScratch, KeepsTheLargestBufferPerSlotUntilReleased) {
  release_thread_scratch();
  const std::shared_ptr<void> first = thread_scratch(1, kLarge);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first.get()) % 64, 0u);
  EXPECT_EQ(thread_scratch(1, 100).get(), first.get()) << "a smaller request reuses the slot's buffer";
  EXPECT_NE(thread_scratch(2, 100).get(), first.get()) << "slots are apart";
  EXPECT_EQ(thread_scratch(3, 0), nullptr);
  EXPECT_THROW(thread_scratch(kThreadScratchSlots, 8), Error);
}

TEST(ThreadScratch, ReleaseDropsLargeBuffersAndKeepsSmallOnes) {
  release_thread_scratch();
  void* small = thread_scratch(0, 1024).get();
  thread_scratch(1, kLarge);  // not held
  const size_t before = storage_bytes().live;
  release_thread_scratch();
  EXPECT_LE(storage_bytes().live + kLarge, before) << "the large buffer's bytes are no longer live";
  EXPECT_EQ(thread_scratch(0, 1024).get(), small) << "a small one stays for the next run";
}

TEST(ThreadScratch, AHeldBufferOutlivesTheReleaseAndTheThreadGetsANewOne) {
  const std::shared_ptr<void> held = thread_scratch(4, kLarge);
  std::memset(held.get(), 7, kLarge);
  release_thread_scratch();
  EXPECT_EQ(static_cast<const unsigned char*>(held.get())[kLarge - 1], 7) << "still the holder's";
  const std::shared_ptr<void> next = thread_scratch(4, kLarge);
  EXPECT_NE(next.get(), held.get());
}

TEST(ThreadScratch, ReleaseReachesOtherThreadsBuffers) {
  release_thread_scratch();
  const size_t before = storage_bytes().live;
  std::thread worker([] { thread_scratch(2, kLarge); });  // kept by the worker's slot after it returns
  worker.join();  // ending the thread drops its buffers too
  EXPECT_EQ(storage_bytes().live, before);
  size_t during = 0;
  bool asked = false, released = false;
  std::mutex m;
  std::condition_variable cv;
  std::thread idle([&] {
    thread_scratch(2, kLarge);
    std::unique_lock lock(m);
    asked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return asked; });
    during = storage_bytes().live;
    release_thread_scratch();
    EXPECT_LE(storage_bytes().live + kLarge, during) << "an idle thread's large buffer is dropped";
    released = true;
    cv.notify_all();
  }
  idle.join();
}

}  // namespace
}  // namespace trainrt
