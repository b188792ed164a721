// Memory assignment of an ExecutionPlan (execution_plan.h): where each value's bytes lie and when
// a run lets go of them, once build_execution_plan has walked the graph into the plan's slots,
// steps and consume points. It decides, in order:
//   1. graph outputs written in place over an arena intermediate or a donated input that dies at
//      their step (SlotKind::kOverOutput; ExecutionPlan::inputs_under_outputs);
//   2. lifetimes over the steps, in-place aliases (over a donated input or an arena one, whichever
//      lowers the run's peak), offsets from the memory planner (plan/memory_plan.h), and blocks
//      moved into the bytes of donated inputs whose last reader has run (plan/dead_input_packing.h);
//   3. after which step each donated input and each run-time sized value is released
//      (ExecutionPlan::input_releases, dynamic_releases).
// It fills the plan's arena offsets, slot kinds, releases and memory stats (PlanStats).
//
//   // plan: slots, steps and consume points built from `graph` under `options`
//   assign_plan_memory(graph, options, *plan);
//   plan->stats.arena_bytes;   // the arena a run needs
#pragma once

#include "trainrt/ir/graph.h"
#include "trainrt/runtime/execution_plan.h"

namespace trainrt {

// Assigns the memory of every slot of `plan` (see above). Called once, by build_execution_plan.
void assign_plan_memory(const Graph& graph, const PlanOptions& options, ExecutionPlan& plan);

// The slot whose memory `slot` shows: itself, or the end of its chain of views.
int viewed_slot(const ExecutionPlan& plan, int slot);

}  // namespace trainrt
