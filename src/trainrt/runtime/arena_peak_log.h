// At VERBOSE, what holds a plan's arena at its peak: the arena values live at the step where the
// most planned bytes are, largest first (in-place chains as their root value).
#pragma once

#include <unordered_map>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/plan/memory_plan.h"
#include "trainrt/runtime/execution_plan.h"

namespace trainrt {

// `buffers` are the plan's arena buffers, `buffer_of_slot` maps a slot to its buffer.
void log_arena_peak(const Graph& graph, const ExecutionPlan& plan, const std::vector<BufferSpec>& buffers,
                    const std::unordered_map<int, int>& buffer_of_slot);

}  // namespace trainrt
