// What every kernel that calls oneDNN shares: one CPU engine, a stream per thread, per-thread
// scratch slots, and the guard that keeps oneDNN's OpenMP team at one thread.
//
// Threads: Debian's oneDNN threads with OpenMP, whose two-thread barriers spin and stall for a
// whole scheduler time slice whenever the partner thread is preempted (docs/gemm.md). Our kernels
// therefore run each oneDNN call single-threaded and split the work on our ThreadPool.
//
//   SingleThreadedOpenMp one_thread;
//   const std::shared_ptr<void> scratch = thread_scratch(kScratchpadSlot, bytes);  // held through the run
//   memory s(pd.scratchpad_desc(), onednn_engine(), scratch.get());
//   const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_SCRATCHPAD, s.get()}};
//   onednn_execute(primitive, args);
#pragma once

#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>

#include "trainrt/core/thread_scratch.h"

namespace trainrt {

// The process-wide CPU engine (never destroyed: primitives may outlive static destructors).
const dnnl::engine& onednn_engine();
// The calling thread's in-order stream on that engine.
dnnl::stream& onednn_stream();

// The thread_scratch slots (core/thread_scratch.h) of the kernels that call oneDNN: slot 0 is the
// primitives' scratchpad, 1-3 operands reordered for one primitive run (conv_primitives.cc), 4 an
// operand the calling thread prepares for the pool's workers (conv_primitives.h: ConvWeights).
inline constexpr int kScratchpadSlot = 0;
inline constexpr int kSharedOperandSlot = 4;

// Runs `primitive` on the calling thread's stream and waits for it. Unlike primitive::execute,
// which builds a std::unordered_map and a std::vector of the arguments on every call, it takes
// them as they are: callers keep their dnnl::memory objects and argument arrays from call to call
// (memory::set_data_handle re-points them) and so allocate nothing themselves. Throws dnnl::error.
void onednn_execute(const dnnl::primitive& primitive, std::span<const dnnl_exec_arg_t> args);

// Sets the calling thread's OpenMP team size to 1 for its lifetime, then restores it (torch's ops
// on the same thread keep their team size).
class SingleThreadedOpenMp {
 public:
  SingleThreadedOpenMp();
  ~SingleThreadedOpenMp();
  SingleThreadedOpenMp(const SingleThreadedOpenMp&) = delete;
  SingleThreadedOpenMp& operator=(const SingleThreadedOpenMp&) = delete;

 private:
  int saved_;
};

}  // namespace trainrt
