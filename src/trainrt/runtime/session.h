// A Session runs a graph: it plans once per input signature and executes the cached plan.
//
// Inputs are bound zero-copy (the caller's memory is read in place). Intermediates live in one
// arena planned per signature (plan/memory_plan.h) and are never heap-allocated in steady state;
// graph outputs are handed to the caller in storage of their own, which the session writes again
// in a later run once the caller has let go of it (a training step's saved values and gradients
// then stay in memory already paged in; a caller that keeps an output keeps it unchanged). Initializers listed in
// SessionOptions::mutable_initializers may be rebound between runs (trainable parameters); all
// others are constants the planner may fold. Outputs listed in SessionOptions::consumed_outputs are
// instead handed to the run's OutputConsumer as soon as each is final (output_consumer.h), in row
// blocks where the consumer takes them and the plan allows (a plan is kept per consumer's answer).
//
//   auto graph = import_onnx_file("mlp.onnx");
//   Session session(std::move(graph));
//   std::vector<Tensor> out = session.run({x});          // x: f32(batch, 784)
//   std::cout << session.last_stats().arena_bytes;
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainrt/core/arena.h"
#include "trainrt/core/tensor.h"
#include "trainrt/ir/graph.h"
#include "trainrt/kernels/kernel.h"
#include "trainrt/runtime/execution_plan.h"
#include "trainrt/runtime/output_consumer.h"
#include "trainrt/runtime/profiler.h"

namespace trainrt {

struct SessionOptions {
  std::set<std::string> mutable_initializers;
  // Inputs holding shapes (small i64 tensors): a plan is built per value, which shape inference
  // and constant folding then see (PlanOptions::value_inputs).
  std::set<std::string> value_inputs;
  // Inputs the run may write over once their last reader has run (PlanOptions::donated_inputs).
  std::set<std::string> donated_inputs;
  // Outputs handed to the run's OutputConsumer as soon as they are final (PlanOptions::
  // consumed_outputs): kept in the arena, not returned.
  std::vector<ConsumedOutput> consumed_outputs;
  // Inputs holding distinct ascending row indices (PlanOptions::row_selections).
  std::set<std::string> row_selections;
  uint64_t seed = 0;           // seeds random ops (Dropout); same seed, same results
  bool profile = false;        // record per-node timings in profiler()
  const KernelTable* kernels = nullptr;  // defaults to the CPU kernel table
  ThreadPool* threads = nullptr;         // defaults to ThreadPool::global()
  // The block intermediates live in, when sessions that never run at the same time share one (a
  // training step's forward and backward programs): each reserves what its plan needs and
  // re-points its views when another one grew the block. Nothing in it outlives a run but the
  // arena_outputs below; other graph outputs get storage of their own. Defaults to an arena of its own.
  std::shared_ptr<Arena> arena;
  // Outputs handed over in the arena's bytes (PlanOptions::arena_outputs: a forward's saved values,
  // which its backward, sharing the arena, then reads in place). While the caller holds one, the
  // block stays theirs: a run that does not read them takes a fresh block (Arena::detach).
  std::set<std::string> arena_outputs;
};

struct MemoryStats {
  size_t planned_arena_bytes = 0;   // the current plan's arena (planned peak of intermediates)
  size_t arena_capacity = 0;        // bytes reserved (max over the plans used; of every session
                                    // sharing the arena)
  size_t peak_dynamic_bytes = 0;    // most bytes of run-time sized intermediates on the heap at once in the last run
  size_t live_lower_bound = 0;      // best possible arena size for the current plan
  size_t output_bytes = 0;          // storage of the last run's graph outputs, which the session
                                    // keeps to write again next run (a training step's saved values
                                    // or gradients): held between runs, beside the arena
};

class Session {
 public:
  explicit Session(std::shared_ptr<Graph> graph, SessionOptions options = {});
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs with one tensor per graph input (in graph input order); returns one per graph output, an
  // empty tensor for each consumed output, which `consumer` got during the run (required when
  // SessionOptions::consumed_outputs is not empty).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, OutputConsumer* consumer = nullptr);
  // run(), and the donated inputs (SessionOptions::donated_inputs) are let go of, their entries of
  // `inputs` reset, right after the last step that touches their bytes: a backward frees each
  // saved value once its last reader has run (ExecutionPlan::input_releases).
  std::vector<Tensor> run_releasing(std::vector<Tensor>& inputs, OutputConsumer* consumer = nullptr);
  // Rebinds a mutable initializer to new data of the same dtype and dims (zero-copy).
  void set_initializer(const std::string& name, const Tensor& data);
  // Lets go of the storage of graph outputs [first, end) that the last run kept to write again next
  // run (graph outputs are kept by default: no fresh pages to fault in when the caller has released
  // them by then). For outputs the caller frees early, such as saved values a backward releases
  // one by one.
  void forget_outputs(size_t first);
  void set_seed(uint64_t seed) { options_.seed = seed; run_counter_ = 0; }
  // Replaces SessionOptions::arena_outputs; the plans are built again at the next run.
  void set_arena_outputs(std::set<std::string> names);

  const Graph& graph() const { return *graph_; }
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  Profiler& profiler() { return profiler_; }
  const PlanStats& last_stats() const;
  MemoryStats memory_stats() const;
  int num_cached_plans() const { return static_cast<int>(plans_.size()); }
  const Arena& arena() const { return *arena_; }

 private:
  std::vector<Tensor> run_impl(const std::vector<Tensor>& inputs, OutputConsumer* consumer,
                               std::vector<Tensor>* releasing);
  ExecutionPlan& plan_for(const std::vector<Tensor>& inputs, const OutputConsumer* consumer);
  void bind(ExecutionPlan& plan, const std::vector<Tensor>& inputs);
  void run_step(PlanStep& step, int index, ExecutionPlan& plan, int64_t row_begin = 0, int64_t row_end = -1);
  void run_step_in_blocks(PlanStep& step, int index, ExecutionPlan& plan, const ConsumePoint& point,
                          OutputConsumer& consumer);
  void infer_at_run_time(PlanStep& step, ExecutionPlan& plan);
  void count_kernel_sized(const PlanStep& step, const ExecutionPlan& plan);
  void release_outputs(ExecutionPlan& plan);

  std::shared_ptr<Graph> graph_;
  SessionOptions options_;
  const KernelTable* kernels_;
  // Plans keyed by the input signature: dtype and dims of every input, values of value_inputs.
  std::map<std::vector<int64_t>, std::unique_ptr<ExecutionPlan>> plans_;
  std::vector<size_t> value_input_positions_;
  std::vector<size_t> consumed_positions_;  // graph output index per SessionOptions::consumed_outputs
  std::vector<int64_t> block_dims_;         // dims of the block being made (run_step_in_blocks)
  ExecutionPlan* last_plan_ = nullptr;
  std::vector<int64_t> last_key_;
  // Run-time dims (by symbol) and the largest value a run gave each (PlanOptions::dim_bounds); when
  // one grows, the plans are built again so that values of that dim fit arena blocks.
  std::map<std::string, int64_t> dim_bounds_;
  bool dim_bounds_grew_ = false;
  std::vector<int64_t> key_scratch_;
  std::shared_ptr<Arena> arena_;
  std::byte* bound_arena_ = nullptr;
  std::map<std::string, Tensor> mutable_data_;
  Profiler profiler_;
  uint64_t run_counter_ = 0;
  size_t dynamic_bytes_ = 0;
  size_t peak_dynamic_bytes_ = 0;
};

}  // namespace trainrt
