// Per-thread scratch buffers for kernels: oneDNN's scratchpads, operands reordered into the layout
// a primitive chose, a weight a thread prepares for the pool's workers.
//
// A thread keeps, per slot, the largest buffer it has been asked for, so the kernels of one run
// allocate only when a size grows. The end of each Session run drops every thread's buffers larger
// than kThreadScratchKeptBytes (release_thread_scratch): what the forward's products needed is not
// held, and counted, through the backward's peak, nor between steps. That costs a large buffer one
// allocation per run (its kernel's work dwarfs it: gpt2-mini and the CNN bench step no slower);
// small ones stay, so small models' steady state allocates nothing for them. Buffers come from
// aligned_storage, so they count in the engine's storage bytes while they live.
//
// A caller holds the returned pointer for as long as it uses the bytes, also on other threads (a
// weight reordered once and read by every worker): a buffer dropped meanwhile lives until its last
// holder lets go, and a thread asking again after a drop gets a new one.
//
//   const std::shared_ptr<void> scratch = thread_scratch(kScratchpadSlot, bytes);
//   run_primitive(..., scratch.get());
#pragma once

#include <cstddef>
#include <memory>

namespace trainrt {

inline constexpr int kThreadScratchSlots = 5;
inline constexpr size_t kThreadScratchKeptBytes = size_t{64} << 10;  // kept across runs up to this

// The calling thread's buffer `slot` (0 .. kThreadScratchSlots-1), 64-byte aligned, of at least
// `bytes` (null for 0); its contents are undefined. The same thread asking for the same slot again
// may get the same bytes: a caller uses one slot for one thing at a time.
std::shared_ptr<void> thread_scratch(int slot, size_t bytes);

// Drops every thread's buffers larger than kThreadScratchKeptBytes; one still held lives on with
// its holder.
void release_thread_scratch();

}  // namespace trainrt
