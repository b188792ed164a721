#include "trainrt/core/thread_pool.h"

#include "trainrt/core/thread_budget.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace trainrt {

namespace {
thread_local bool t_inside_pool = false;
std::atomic<int> g_budget{0};  // set_thread_budget; 0: the whole pool
std::atomic<const ThreadPool*> g_global{nullptr};  // the pool the budget applies to, once made
}  // namespace

void set_thread_budget(int n) { g_budget.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int thread_budget() {
  const int size = ThreadPool::global().num_threads(), n = g_budget.load(std::memory_order_relaxed);
  return n > 0 && n < size ? n : size;
}

bool inside_thread_pool_loop() { return t_inside_pool; }

int ThreadPool::default_num_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& ThreadPool::global() {
  static ThreadPool& pool = []() -> ThreadPool& {
    static ThreadPool p(default_num_threads());
    g_global.store(&p, std::memory_order_release);
    return p;
  }();
  return pool;
}

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work_on_current_job() {
  for (;;) {
    int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= job_chunks_) return;
    int64_t begin = c * job_chunk_;
    int64_t end = std::min(job_n_, begin + job_chunk_);
    try {
      (*job_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job_chunks_) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

// Worker `index` (1 .. num_threads() - 1) takes part in a job only while the thread budget
// (thread_budget.h) covers it; the global pool alone has a budget.
void ThreadPool::worker_loop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  auto in_budget = [&] {
    const int n = this == g_global.load(std::memory_order_acquire) ? g_budget.load(std::memory_order_relaxed) : 0;
    return n <= 0 || index < n;
  };
  for (;;) {
    // Spin briefly: back-to-back kernels in one engine call reuse awake workers.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (in_budget() && published_generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (!in_budget()) continue;
      ++active_workers_;  // under the lock: run() resets the job only when no worker is inside one
    }
    work_on_current_job();
    if (active_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, RangeFn fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = this == g_global.load(std::memory_order_acquire) ? thread_budget() : num_threads();
  if (workers_.empty() || max_chunks <= 1 || t_inside_pool || threads <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  // A few chunks per thread balances uneven chunks without much overhead.
  int64_t chunks = std::min<int64_t>(max_chunks, threads * 4);
  {
    // A worker that finished its last chunk of the previous job may still be on its way out of
    // work_on_current_job; resetting next_chunk_ under it could let it take (and count) a chunk of
    // this job before chunks_done_ is reset, and run() would then wait forever.
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_workers_.load(std::memory_order_acquire) == 0; });
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = (n + chunks - 1) / chunks;
    job_chunks_ = (n + job_chunk_ - 1) / job_chunk_;
    next_chunk_.store(0);
    chunks_done_.store(0);
    error_ = nullptr;
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  t_inside_pool = true;
  work_on_current_job();
  t_inside_pool = false;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return chunks_done_.load() == job_chunks_; });
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace trainrt
