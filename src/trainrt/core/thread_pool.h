// A fixed pool of worker threads for data-parallel loops inside kernels.
//
// Sized to the cores this process may run on (sched_getaffinity). The calling thread takes part in
// every loop, so a pool of N threads starts N-1 workers. Idle workers spin for a few microseconds,
// then sleep on a condition variable: between engine calls they use no CPU, so torch's intra-op
// threads own the cores while torch runs and ours own them while the engine runs (the Python thread
// is blocked in the engine call). A parallel_for issued from inside a worker runs serially, so
// nested loops never oversubscribe.
//
//   ThreadPool::global().parallel_for(n, /*grain=*/4096, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) y[i] = x[i] * 2;
//   });
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace trainrt {

// A non-owning reference to a callable void(int64_t, int64_t); cheap to pass, no allocation.
class RangeFn {
 public:
  template <typename F>
  RangeFn(F& f) : obj_(&f), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}  // NOLINT
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, created on first use with default_num_threads() threads.
  static ThreadPool& global();
  static int default_num_threads();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into chunks of at least `grain` iterations and runs fn(begin, end) on them,
  // in parallel when there is more than one chunk. Returns when all chunks are done. The first
  // exception thrown by fn is rethrown here after the loop finishes.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    auto& f = fn;
    run(n, grain, RangeFn(f));
  }

 private:
  void run(int64_t n, int64_t grain, RangeFn fn);
  void worker_loop(int index);
  void work_on_current_job();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_generation_{0};
  // The current job.
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int64_t job_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> chunks_done_{0};
  std::atomic<int> active_workers_{0};  // workers inside work_on_current_job
  std::exception_ptr error_;
  std::mutex run_mutex_;  // one parallel loop at a time from outside the pool
};

}  // namespace trainrt
