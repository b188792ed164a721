// An ExecutionPlan: everything needed to run a graph for one concrete input signature.
//
// Built once per signature (dtype and dims of every graph input) by build_execution_plan():
//   1. shape inference over the schedule with concrete input dims;
//   2. constant folding of nodes whose inputs are all known constants (shape arithmetic such as
//      Shape -> Gather -> Concat -> Reshape), run at plan time with the same kernels;
//   3. each remaining value becomes an arena buffer when its dims are static, a "dynamic" value
//      (sized at run time by re-running inference on real inputs) otherwise, or a graph output
//      (fresh storage handed to the caller every run);
//   4. outputs of view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity; ReduceSumToShape and
//      Expand whose output has input 0's dims) become views of their input's memory: no buffer, no copy; the step only points the view at the input's bytes (a
//      view handed to the caller shares the fresh storage of the value it views);
//   5. lifetimes from the schedule (a read of a view is a read of the buffer it views, so that
//      buffer lives as long as any view of it), in-place aliases where the op's schema allows and
//      the input's buffer dies at that node (a donated input's bytes first: PlanOptions::
//      donated_inputs), then offsets from the memory planner (plan/memory_plan.h); intermediates
//      live where the arena peaks may then move into the bytes of donated inputs whose last reader
//      has run (plan/dead_input_packing.h), where that lowers the run's peak;
//   6. consumed outputs (PlanOptions::consumed_outputs) stay arena values, handed to an
//      OutputConsumer after the step that makes them final and the last read of their hold input
//      (ExecutionPlan::consume_points), and live until then; one consumed in row blocks
//      (PlanOptions::consume_row_block_bytes) takes one block's bytes in the arena. A kept one
//      (ConsumedOutput::keep) is a graph output in fresh storage instead, handed over at that
//      point for the consumer to keep (a gradient given to torch as soon as it is final);
//   7. each donated input's release point: the step after which nothing touches its bytes
//      (ExecutionPlan::input_releases).
// A forward's saved values may stay in the arena (PlanOptions::arena_outputs), in bytes its late
// intermediates leave free, and its backward plans around them while they live
// (PlanOptions::inputs_in_arena): the step's intermediates and saved values then share one block
// instead of the saved values taking storage beside an arena that is idle while they wait.
// Executing the plan (executor.h) then allocates nothing for planned intermediates.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {

enum class SlotKind : uint8_t {
  kInput,        // a graph input: bound to the caller's tensor every run
  kConstant,     // an initializer or a folded value: fixed data owned by the plan or graph
  kMutable,      // an initializer the caller may rebind between runs (trainable parameter)
  kArena,        // planned intermediate at a fixed arena offset
  kDynamic,      // dims known only at run time: inference + heap allocation per run
  kOutput,       // graph output: fresh storage every run, returned to the caller
  kView,         // the bytes of slot view_of, in this slot's dims: pointed there when its step runs;
                 // a graph output only when the slot it views is a kOutput (both handed over)
  kOverInput,    // written over the bytes of donated input slot view_of, at arena_offset bytes in
                 // (in place over it, or placed there once its last reader has run): pointed there
                 // every run, in this slot's dims; takes no arena bytes
  kOverOutput,   // a graph output written in place over slot view_of, an intermediate that dies at
                 // this step and so got output storage of its own (kOutput, or kOverOutput in a
                 // chain): pointed there when its step runs; the caller gets that storage
};

// Run-time home of one value.
struct Slot {
  SlotKind kind = SlotKind::kArena;
  Tensor tensor;            // current binding (view into the arena, input, constant, ...)
  size_t arena_offset = 0;  // for kArena, and kDynamic with bound_bytes; kOverInput: into the input
  int view_of = -1;         // for kView, kOverInput: the slot whose bytes it shows
  const Value* value = nullptr;
  // kDynamic: per dim, the name of a run-time dim ("" when static or unnamed), and the bytes at
  // the bounds PlanOptions::dim_bounds gives those (0: a dim has none). With a bound the value gets
  // an arena block of that size, planned like the others, instead of heap storage per run; a run
  // that needs more bytes gets heap storage, and the Session plans again with the larger bound.
  std::vector<std::string> dim_symbols;
  size_t bound_bytes = 0;
};

struct PlanStep {
  const Node* node = nullptr;
  const OpSchema* schema = nullptr;
  KernelFn kernel;
  std::vector<int> inputs;   // slot index per node input, -1 for omitted
  std::vector<int> outputs;  // slot index per node output, -1 for omitted
  bool needs_runtime_inference = false;  // some output is kDynamic or a non-static kOutput
  // Scratch pointer arrays handed to the kernel (sized at plan time: no per-run allocation).
  std::vector<const Tensor*> input_ptrs;
  std::vector<Tensor*> output_ptrs;
};

struct PlanStats {
  size_t arena_bytes = 0;           // what the memory plan needs (planned peak)
  size_t live_lower_bound = 0;      // max over steps of live planned bytes: no plan can do better
  size_t run_peak_bytes = 0;        // the most a run holds at once beyond its inputs and constants:
                                    // the arena, donated inputs until let go (to the run's end when an
                                    // output shows their bytes), graph outputs from their step on
  int num_steps = 0;
  int num_folded = 0;               // nodes evaluated at plan time
  int num_inplace = 0;              // outputs sharing their input's buffer
  int num_over_inputs = 0;          // values written over a donated input (kOverInput): in place, or
                                    // placed in its bytes once it is dead
  int num_over_outputs = 0;         // graph outputs written over a dying intermediate (kOverOutput)
  int num_views = 0;                // outputs that view their input's bytes (no buffer, no copy)
  int num_reused = 0;               // buffers placed over dead ones
  int num_dynamic = 0;              // values sized at run time
};

// When a run hands a consumed output to its OutputConsumer: right after step `after_step` (-1:
// before the first step, for a value no step produces or reads, such as a folded constant).
// block_rows > 0: step after_step makes the output itself, block_rows rows of its output 0 at a time
// (KernelContext::row_begin / row_end) into one block of arena bytes, each handed over as made
// (OutputConsumer::consume_rows); the slot's tensor has the whole output's dims, its bytes one
// block's.
struct ConsumePoint {
  int after_step = -1;
  size_t output = 0;  // graph output index
  int slot = -1;
  int64_t block_rows = 0;
};

struct ExecutionPlan {
  std::vector<Slot> slots;
  std::vector<PlanStep> steps;
  std::vector<int> input_slots;   // per graph input
  std::vector<int> output_slots;  // per graph output
  std::vector<ConsumePoint> consume_points;  // by after_step, then output index
  std::vector<bool> output_consumed;         // per graph output: handed over during the run
  std::vector<bool> output_kept;             // per graph output: consumed, and the consumer keeps it
  // (after step, graph input index), by step: when a donated input's bytes are no longer touched
  // (its last reader and every value written in place over it done; -1: no step touches them).
  // Session::run_releasing lets go of such an input there, as eager autograd frees a saved tensor
  // after its last use.
  std::vector<std::pair<int, size_t>> input_releases;
  // Graph input indices whose donated bytes a graph output is written over (kOverOutput viewing the
  // input's slot; a gradient scaled over the forward's copy of it): never released during the run,
  // and the caller gets the input's own storage as that output.
  std::vector<size_t> inputs_under_outputs;
  // (after step, slot), by step: a run-time sized intermediate (SlotKind::kDynamic), and each view
  // of one, after the last step that reads its bytes (through any view, or a consume point). The
  // Session lets go of it there, so that the run holds only the live ones (heap storage: without
  // this, all of them until the run ends).
  std::vector<std::pair<int, int>> dynamic_releases;
  std::deque<Tensor> folded;      // storage of values folded at plan time (stable addresses)
  PlanStats stats;
};

// A graph output handed to an OutputConsumer during the run (runtime/output_consumer.h) rather
// than returned. `hold` names a graph input the consumer writes (the parameter a gradient updates):
// the output is consumed only after the last step that reads that input, directly or through a
// view. Empty: consumed as soon as the output is final. `keep`: the consumer keeps the value, so
// it lives in fresh storage as a returned output does (zero-copy: the consumer shares it), not in
// arena bytes valid only during the call; never in row blocks.
struct ConsumedOutput {
  std::string output;
  std::string hold;
  bool keep = false;
};

struct PlanOptions {
  // Initializers whose data the caller may change between runs: never folded into constants.
  std::set<std::string> mutable_initializers;
  size_t fold_max_elements = 1 << 16;  // larger constant subgraphs are left to run time
  // Graph inputs whose values (not only dims) the plan is built for, read like constants:
  // shapes handed over from another program (a Session keys its plans on their values).
  std::set<std::string> value_inputs;
  // Graph inputs whose bytes the run may overwrite once their last reader has run: an in-place op
  // then writes its output there instead of in the arena, and later intermediates may be placed
  // there (a backward program over the values its forward saved, as eager autograd frees a saved
  // tensor after its last use and its allocator hands the block to the next gradient). The caller hands
  // such an input over: no other input, and nothing it reads later, may share those bytes. Never
  // a graph output (it is copied out at the end of the run).
  std::set<std::string> donated_inputs;
  // Outputs consumed during the run: arena values (not fresh storage, but for kept ones), live until consumed. A hold
  // input may be neither donated nor (a view of it) a returned graph output.
  std::vector<ConsumedOutput> consumed_outputs;
  // Consumed outputs (by name) whose consumer takes blocks of this many bytes of rows: such an
  // output is made and consumed block by block when its producer computes row ranges (KernelTable::
  // add_row_ranges), it is the producer's output 0 with static dims and more than one block of
  // rows, no later step reads it, and the producer is after the last read of its hold input (the
  // consumer writes the hold between blocks). Else it is consumed whole.
  std::map<std::string, size_t> consume_row_block_bytes;
  // Run-time dims (by symbol) with the largest value a run has given them (Session): a value sized
  // at run time whose every such dim is here gets an arena block of that size (Slot::bound_bytes).
  std::map<std::string, int64_t> dim_bounds;
  // Graph outputs handed over in the arena's bytes rather than in storage of their own (a
  // forward's saved values, for its backward to read there): where their dims are static, they are
  // planned as intermediates that outlive the run, in bytes the run's other values are done with.
  // The Session hands each over as a view that keeps the arena's block alive (core/arena.h).
  std::set<std::string> arena_outputs;
  // Graph inputs whose bytes lie in the arena at these offsets (what a run before handed over
  // there: arena_outputs): the plan keeps every other value out of them until their last reader
  // has run (a donated input) or the run ends, and may write over them in place after that.
  std::map<std::string, size_t> inputs_in_arena;
  // Bytes the run's arena block holds anyway (a backward sharing its forward's block: the forward's
  // arena). The run's peak counts the larger of this and the planned arena, so a choice that only
  // shrinks the arena below it gains nothing, and one that grows the arena within it costs nothing.
  size_t arena_floor_bytes = 0;
  // Graph inputs holding distinct row indices in ascending order (ValidRows, ops/valid_rows.h):
  // where one has as many rows as the tensor it selects from, it names every row in order, so a
  // Gather along axis 0 by it (and a GatherGrad scattering back by it) shows its data unchanged: a
  // view, not a copy.
  std::set<std::string> row_selections;
};

// Builds a plan for the given concrete inputs (one per graph input, in order). Throws ShapeError
// naming the input when a dtype or dim contradicts the graph's declaration.
std::unique_ptr<ExecutionPlan> build_execution_plan(Graph& graph, const std::vector<Tensor>& inputs,
                                                    const KernelTable& table, const PlanOptions& options);

}  // namespace trainrt
