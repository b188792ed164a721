// Buffer lifetimes from a schedule: the first and last step at which each buffer is needed.
//
// Use it to fill BufferSpec::first_step / last_step (memory_plan.h) once a program's steps are in
// execution order. It knows nothing of the IR: a step is just the buffer ids it reads and writes.
// A buffer is needed from the first step that touches it to the last one, inclusive. Buffers that
// outlive the program (graph outputs, values saved for a later program such as the backward) get
// last_step = number of steps, one past the last step, so nothing may reuse their memory.
//
//   // s0: a = f(x)   s1: b = g(a)   s2: c = h(a, b); c is a graph output
//   std::vector<StepUses> steps = {{{x}, {a}}, {{a}, {b}}, {{a, b}, {c}}};
//   std::vector<Lifetime> life = compute_lifetimes(steps, num_buffers, /*outliving=*/{c});
//   // life[a] = {0, 2}, life[b] = {1, 2}, life[c] = {2, 3}
#pragma once

#include <span>
#include <vector>

namespace trainrt {

// The step of a buffer that no step reads or writes (and that does not outlive the program).
inline constexpr int kNeverUsed = -1;

// One step of a schedule: the buffer ids it reads and the buffer ids it writes.
struct StepUses {
  std::vector<int> reads;
  std::vector<int> writes;
};

struct Lifetime {
  int first_step = kNeverUsed;
  int last_step = kNeverUsed;  // inclusive
};

// Lifetimes of buffers 0..num_buffers-1 over `steps` (in execution order). Buffers in `outliving`
// live until steps.size(); one that no step touches is then born there too. Throws InternalError
// naming the step when an id is out of range.
std::vector<Lifetime> compute_lifetimes(std::span<const StepUses> steps, int num_buffers,
                                        std::span<const int> outliving);

}  // namespace trainrt
