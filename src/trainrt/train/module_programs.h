// ModulePrograms: the forward and backward programs of a model whose parameters are graph inputs,
// run as two calls (autograd's forward and backward). This is what RTModule drives.
//
// The forward graph is first rewritten by the forward passes (a bias Add folded into the FusedMatMul
// before it: passes/matmul_bias_fusion.h); the joint graph (build_gradients with the outputs'
// gradients fed in) is partitioned
// (choose_saved_values, then partition_joint_graph): forward() runs the forward program and keeps, in a ForwardState, the
// saved values and the input tensors the backward reads; backward() feeds those plus the output
// gradients to the backward program and returns the gradients of `wrt`, in `wrt` order.
// The backward may write over each saved value once its last reader has run (SessionOptions
// donated inputs: an in-place op's output goes there, not in the arena), so a state serves one
// backward; a second is refused. backward() can hand some gradients to an
// OutputConsumer instead of returning them (GradientConsumers: an optimizer stepping each parameter
// inside the backward, train/optimizer_in_backward.h, or torch taking each gradient as it becomes
// final): each is consumed as soon as it is final and the backward has read that parameter for the
// last time. infer() runs the plain graph for eval / no-grad calls and keeps nothing. The three share one
// arena (they never run at the same time): peak intermediates of the largest, not of all three.
//
//   ModulePrograms p(graph, /*grad_outputs=*/{"loss"}, /*wrt=*/{"fc.weight", "fc.bias"});
//   ForwardState state;
//   auto outputs = p.forward({w, b, x}, state, seed);
//   auto grads = p.backward(state, {Tensor::scalar(1.f)});   // d loss / d fc.weight, fc.bias
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainrt/ir/graph.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/passes/pass.h"
#include "trainrt/plan/layer_recompute.h"
#include "trainrt/plan/partition.h"
#include "trainrt/runtime/session.h"
#include "trainrt/train/row_selection_prologue.h"

namespace trainrt {

// What one forward call leaves for its backward call (moved out of the caller once used).
struct ForwardState {
  std::map<std::string, Tensor> values;  // saved values, forward inputs and outputs, by name
  // The model outputs (indices) whose bytes the backward reads: itself, or a saved value viewing
  // it. A caller that hands outputs to users checks these were not written in place (autograd's
  // version counters) before backward().
  std::vector<size_t> outputs_read;
  bool used = false;
};

// The gradients a backward hands to `consumer` during the run, consume(wrt index, gradient),
// instead of returning them; each wrt index at most once over both lists. Each goes once it is
// final and after the backward's last read of its wrt entry's input (the parameter: W in
// dX = dY W^T), since the consumer may write that parameter.
//   stepped:     in arena bytes valid during the call (an optimizer stepping the parameter,
//                train/optimizer_in_backward.h); their bytes then go to the next value, so the
//                backward never holds all gradients at once;
//   handed_over: in their own storage, which the consumer keeps (zero-copy): a gradient leaving
//                the engine as soon as it is final (RTModule gives it to torch's AccumulateGrad).
struct GradientConsumers {
  OutputConsumer* consumer = nullptr;
  std::vector<size_t> stepped;
  std::vector<size_t> handed_over;
  bool empty() const { return stepped.empty() && handed_over.empty(); }
};

// What a step holds with saved values in the arena's idle bytes against without, for the judgement
// of ModulePrograms::keep_saved_values_in_arena: S saved bytes, A of them in the arena, G bytes of
// gradients, the arena at C0 before the backward and C1 after it. The step's peak is about
// C1 + max(S - A, G) with them there, against C0 + max(S, G) without.
struct SavedValuesInArena {
  size_t saved_bytes = 0;           // S
  size_t in_arena_bytes = 0;        // A
  size_t gradient_bytes = 0;        // G
  size_t arena_before = 0;          // C0
  size_t arena_after = 0;           // C1
  size_t peak_with() const { return arena_after + std::max(saved_bytes - in_arena_bytes, gradient_bytes); }
  size_t peak_without() const { return arena_before + std::max(saved_bytes, gradient_bytes); }
  bool pays() const { return peak_with() < peak_without(); }
};

class ModulePrograms {
 public:
  // `profile`: record per-node timings of the forward and backward programs (profiler()).
  // `optimize`: the graph rewrites (fusion passes, the saved-set choice); off, the captured graph
  // is differentiated and partitioned as it is (ORTModule's compute optimizer switch), but for
  // `memory`: what the backward recomputes instead of saving, honoured either way: checkpointed
  // regions (plan/checkpoint_recompute.h) and the memory level over repeated layers
  // (plan/layer_recompute.h).
  // `label_sparsity`: losses with ignored labels run on the valid rows (passes/label_sparsity.h),
  // with `optimize` only (ORTModule's ENABLE_SPARSE_OPTIMIZER).
  // `padding_elimination`: the attention mask's padding tokens leave the row-wise ops
  // (passes/padding_elimination.h), with `optimize` only (ORTModule's
  // ENABLE_EMBEDDING_SPARSE_OPTIMIZER).
  // `codegen`: elementwise chains of the forward and backward programs run as generated kernels
  // (train/codegen_fusion.h), with `optimize` only (ORTModule's USE_TRITON).
  ModulePrograms(std::shared_ptr<Graph> graph, std::vector<std::string> grad_outputs, std::vector<std::string> wrt,
                 bool profile = false, bool optimize = true, const MemoryRequest& memory = {},
                 bool label_sparsity = true, bool padding_elimination = false,
                 std::optional<CodegenOptions> codegen = std::nullopt);

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs, ForwardState& state, uint64_t seed);
  // `output_grads` has one tensor per grad_outputs entry (undefined = zeros: the work only it
  // feeds is not done, as in eager; BackwardVariant). Returns one tensor
  // per wrt entry; those `consumers` take come back empty (GradientConsumers). Throws InvalidModel
  // when the state was already used (backward called twice) and ShapeError naming the index when
  // one taken is out of range or repeated. `retain` (autograd's retain_graph) keeps the state for
  // another backward: the saved values the backward would write over are copied first, so a
  // retained backward costs their bytes once more.
  std::vector<Tensor> backward(ForwardState& state, const std::vector<Tensor>& output_grads,
                               const GradientConsumers& consumers = {}, bool retain = false);
  std::vector<Tensor> infer(const std::vector<Tensor>& inputs, uint64_t seed);

  const std::vector<std::string>& unreached() const { return unreached_; }
  // What the memory request made: layers recomputed, forward nodes copied into the backward.
  int layers_recomputed() const { return layers_recomputed_; }
  int nodes_recomputed() const { return nodes_recomputed_; }
  // The memory optimizer's recompute subgraphs: each pattern found, how often, and how often applied.
  const std::vector<RecomputePattern>& recompute_patterns() const { return recompute_patterns_; }
  // What each pass of the forward pipeline (CSE, fusions; before autodiff) did; empty unoptimized.
  const std::vector<PassOutcome>& forward_pass_report() const { return forward_pass_report_; }
  size_t num_wrt() const { return wrt_.size(); }
  // The forward inputs (indices) the backward reads in place (W in dX = dY W^T): a caller checks
  // they were not written in place between forward() and backward().
  const std::vector<size_t>& inputs_read_by_backward() const { return inputs_read_; }
  // The block the three programs share for their intermediates.
  const Arena& arena() const { return forward_->arena(); }
  MemoryStats forward_memory() const { return forward_->memory_stats(); }
  // Whether the forward leaves its saved values in the arena's idle bytes (keep_saved_values_in_arena).
  bool saved_values_in_arena() const { return !arena_outputs_off_; }
  // Bytes of the saved values the last forward left in its state (freed during its backward).
  size_t saved_bytes() const { return saved_bytes_; }
  // Of those, the bytes the forward left in the arena's idle bytes (SessionOptions::arena_outputs).
  size_t saved_in_arena_bytes() const { return saved_in_arena_bytes_; }
  // Of the backward session that ran last (the one with consumed gradients, or the plain one).
  MemoryStats backward_memory() const { return last_backward_->memory_stats(); }
  Profiler& forward_profiler() { return forward_->profiler(); }
  Profiler& backward_profiler() { return last_backward_->profiler(); }
  const Graph& forward_graph() const { return *programs_.forward; }
  // The backward that ran last: the plain one, or the variant for the gradients that were absent.
  const Graph& backward_graph() const { return last_backward_->graph(); }
  const Graph& joint_graph() const { return *joint_; }
  // The losses label sparsity rewrote (0 when off or none matched).
  int sparse_losses() const { return sparse_losses_; }
  // The forward inputs the row-selection prologue computes (train/row_selection_prologue.h): label
  // sparsity's "<labels>/valid_rows", padding elimination's "<mask>/kept_tokens/rows".
  std::vector<std::string> row_selections() const;
  void keep_saved_values_in_arena(size_t capacity_before, size_t gradient_bytes);
  // Per row selection, of the last forward: (its name, rows kept, rows it selected from).
  struct RowCount {
    std::string name;
    int64_t kept = 0, of = 0;
  };
  const std::vector<RowCount>& last_row_counts() const { return last_row_counts_; }
  // Forward FLOPs a row of the products padding elimination moved costs (0 when it did not fire).
  int64_t padding_row_flops() const { return padding_row_flops_; }
  // What padding elimination did ("42 ops on the kept tokens") or why it did not fire; empty when off.
  const std::string& padding_elimination() const { return padding_elimination_; }

 private:
  std::shared_ptr<Graph> graph_;
  std::shared_ptr<Graph> joint_;
  TrainingPrograms programs_;
  std::vector<std::string> grad_outputs_, wrt_;
  std::vector<std::string> output_grad_inputs_;  // per grad_outputs entry
  std::vector<size_t> grad_position_;            // per wrt entry: its index among backward outputs
  std::vector<size_t> wrt_of_output_;            // per backward output: its wrt entry
  void hand_over_saved_values(const ForwardState& state, std::vector<Tensor>& inputs) const;
  // `absent`: per grad_outputs entry, whether autograd gave no gradient (the backward variant).
  Session& backward_session(const GradientConsumers& consumers, const std::vector<bool>& absent);

  // The backward for calls where the gradients of some outputs are absent (zeros): the plain
  // backward simplified by passes/zero_input_elimination.h, one per set, built at first use.
  struct BackwardVariant {
    std::shared_ptr<Graph> graph;
    std::unique_ptr<Session> session;
    std::vector<bool> reads_output_grad;  // per grad_outputs entry: still an input read
  };
  BackwardVariant& variant(const std::vector<bool>& absent);
  std::map<std::vector<bool>, BackwardVariant> variants_;

  std::vector<std::string> unreached_;
  int layers_recomputed_ = 0, nodes_recomputed_ = 0, sparse_losses_ = 0;
  std::vector<RecomputePattern> recompute_patterns_;
  std::vector<PassOutcome> forward_pass_report_;
  bool label_sparsity_ = false;
  std::string padding_elimination_;
  RowSelectionPrologue row_selection_;               // the sparse optimizers' ValidRows, run before the forward
  std::unique_ptr<Session> row_selection_session_;
  std::vector<RowCount> last_row_counts_;
  int64_t padding_row_flops_ = 0;
  size_t saved_bytes_ = 0;
  size_t saved_in_arena_bytes_ = 0;
  // Whether the forward leaves saved values in the arena (SessionOptions::arena_outputs); judged
  // once, at the first backward that read some there (keep_saved_values_in_arena).
  bool arena_outputs_judged_ = false;
  bool arena_outputs_off_ = false;
  std::shared_ptr<Arena> arena_;
  std::set<std::string> donated_;  // backward inputs that are saved values: written over in place
  std::vector<size_t> inputs_read_;       // forward inputs that are backward inputs
  std::vector<bool> output_is_read_;      // per model output: a backward input itself
  size_t num_outputs_ = 0;
  SessionOptions backward_options_;
  std::unique_ptr<Session> forward_, backward_, inference_;
  // The backward that hands the gradients of `consumed_` (wrt index -> kept, sorted) to a consumer:
  // one session per set, rebuilt when the set changes (an optimizer added or changed: rare).
  std::vector<std::pair<size_t, bool>> consumed_;
  std::vector<bool> consumed_absent_;  // the variant consuming_backward_ runs
  std::unique_ptr<Session> consuming_backward_;
  Session* last_backward_ = nullptr;
};

}  // namespace trainrt
