// The memory planner: an offset for every buffer of a program inside one arena, reusing the memory
// of buffers that are dead.
//
// Use it once per concrete shape signature, after the schedule is fixed: describe each buffer by
// its size and lifetime (lifetimes.h computes those from a schedule), mark in-place outputs as
// aliases of the input they overwrite, and carve an Arena (core/arena.h) of `arena_bytes` with the
// offsets. The planner knows nothing of the IR; buffers are indices.
//
//   // s0: a = f(x)   s1: b = g(a)   s2: c = h(b)   s3: c = relu_(c), in place; x is a graph input
//   std::vector<BufferSpec> buffers = {
//       {.size_bytes = 4096, .preexisting = true},                           // 0: x
//       {.size_bytes = 4096, .first_step = 0, .last_step = 1},               // 1: a
//       {.size_bytes = 4096, .first_step = 1, .last_step = 2},               // 2: b
//       {.size_bytes = 4096, .first_step = 2, .last_step = 3},               // 3: c
//       {.size_bytes = 4096, .first_step = 3, .last_step = 4, .alias_of = 3},  // 4: relu_(c)
//   };
//   MemoryPlan plan = plan_memory(buffers);
//   // c sits over a's memory (kReuse), relu_(c) shares c's (kShare); plan.arena_bytes == 8192.
//
// Algorithm: greedy by size for offset calculation (Pisarchyk & Lee, "Efficient Memory Management
// for Deep Neural Net Inference", 2020, arXiv:2001.03288; the strategy of TFLite's ArenaPlanner and
// SimpleMemoryArena). An alias group (a buffer and every buffer written in place over it, through
// chains of aliases) is one block: as large as its root and live from the earliest first_step to
// the latest last_step of its members. Blocks at a fixed offset are placed first; the others are
// taken largest first; optional blocks last, largest first, each where it fits below the others'
// end or nowhere (ties: earlier first_step,
// then lower index) and each goes to the lowest aligned offset where it overlaps in memory no
// already placed block whose lifetime overlaps its own. The paper and TFLite take the smallest gap
// that fits instead; on 4000 random programs like memory_plan_test.cc's, the lowest offset needs
// less (mean arena / live_bytes_lower_bound() 1.050 against 1.060). Cost: O(G^2) in the number
// of blocks G, fine for the thousands of buffers of a training step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "trainrt/core/tensor.h"

namespace trainrt {

// How a buffer gets its memory, in ONNX Runtime's vocabulary (onnxruntime/core/framework/
// alloc_kind.h).
enum class AllocKind : uint8_t {
  kAllocate,     // a fresh region of the arena: it covers no byte of a buffer that died earlier
  kReuse,        // placed over (part of) the memory of a buffer that died earlier
  kShare,        // an in-place alias: the same memory as the buffer it overwrites
  kPreexisting,  // not in the arena: graph inputs, initializers, tensors owned by the caller
  kNotPlaced,    // optional, and it fit nowhere below the other blocks (BufferSpec::optional)
};

std::string_view to_string(AllocKind kind);

inline constexpr int kNoAlias = -1;
inline constexpr size_t kNoOffset = std::numeric_limits<size_t>::max();

// One buffer to place. Steps are positions in the schedule; a buffer live at steps [first_step,
// last_step] (inclusive) must not share memory with another live at any of those steps.
struct BufferSpec {
  size_t size_bytes = 0;
  int first_step = 0;
  int last_step = 0;  // inclusive; the number of steps for a buffer that outlives the program
  // Index of the buffer this one overwrites in place (the output of an in-place op written over its
  // input): both get one offset. Must be no larger than that buffer. Chains are allowed.
  int alias_of = kNoAlias;
  // Owned elsewhere: gets no offset and its lifetime is ignored. Aliases of it are preexisting too
  // (an optimizer updating a parameter the caller owns in place).
  bool preexisting = false;
  // Already at this offset in the arena (a saved value its forward left there for the backward
  // now planned): placed before the others, which keep out of its bytes while it lives. Aliases
  // of it share the offset. Fixed buffers live at the same time must not overlap in memory.
  size_t fixed_offset = kNoOffset;
  // Placed only in bytes below the end of the other blocks, where it overlaps none live at the same
  // time (a forward's saved value in arena bytes idle while it waits for the backward): it never
  // makes the arena larger. One that fits nowhere gets kNoOffset and kNotPlaced, for the caller to
  // store elsewhere. Neither an alias nor aliased.
  bool optional = false;
};

struct MemoryPlan {
  std::vector<size_t> offsets;   // per buffer: bytes from the arena base; kNoOffset if preexisting
  std::vector<AllocKind> kinds;  // per buffer
  size_t arena_bytes = 0;        // the peak the plan needs: the end of its highest block
};

// Places `buffers` in one arena; every offset is a multiple of `alignment` (a power of two).
// Zero-size buffers take no bytes: offset 0, kind kAllocate (or kShare), as in TFLite's arena.
// Throws InternalError naming the buffer when a spec is inconsistent: an alias out of range, a
// cycle of aliases, an alias larger than its target, a preexisting alias, an empty lifetime, a
// fixed offset on an alias or a misaligned one, fixed buffers overlapping while both live.
MemoryPlan plan_memory(std::span<const BufferSpec> buffers, size_t alignment = kTensorAlignment);

// The most bytes live at any one step (each alias group counted once, preexisting and optional
// buffers not at all). No plan can use a smaller arena; alignment padding and fragmentation make up the rest.
size_t live_bytes_lower_bound(std::span<const BufferSpec> buffers);

}  // namespace trainrt
