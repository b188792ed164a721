// Memory assignment of an ExecutionPlan whose steps, slots and consume points are built (see
// plan_memory_assignment.h): where each value's bytes lie and when a run lets go of them.
#include "trainrt/runtime/plan_memory_assignment.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainrt/core/logging.h"
#include "trainrt/passes/pass.h"
#include "trainrt/plan/dead_input_packing.h"
#include "trainrt/plan/lifetimes.h"
#include "trainrt/plan/memory_plan.h"
#include "trainrt/runtime/arena_peak_log.h"

namespace trainrt {
namespace {

class PlanMemoryAssigner {
 public:
  PlanMemoryAssigner(const Graph& graph, const PlanOptions& options, ExecutionPlan& plan)
      : graph_(graph), options_(options), plan_(plan) {}

  void assign() {
    write_outputs_over_dying_inputs();
    assign_memory();
    place_dynamic_releases();
  }

 private:
  // A graph output its op may write in place over an arena intermediate that dies at that step (a
  // gradient accumulated onto another contribution: GatherGrad's addend, a Sum's operand) is
  // written there: the intermediate gets output storage from its own step on (kOutput) and the
  // output shows it (kOverOutput), so the arena never holds the intermediate and no second
  // buffer of the output's size exists. Steps are taken last first, so the intermediate, now a
  // kOutput, may in turn be written over one its own step lets die (a chain). A donated input
  // dying there is taken the same way (a parameter's gradient the forward made, scaled by the
  // loss gradient): the output shows the input's bytes, which the caller then gets.
  void write_outputs_over_dying_inputs() {
    auto& slots = plan_.slots;
    const int num_steps = static_cast<int>(plan_.steps.size());
    std::vector<int> last_read(slots.size(), -1);  // per slot: the last step reading its bytes
    under_output_.assign(slots.size(), false);
    for (int s = 0; s < num_steps; ++s)
      for (int slot : plan_.steps[static_cast<size_t>(s)].inputs)
        if (slot >= 0) last_read[static_cast<size_t>(viewed_slot(plan_, slot))] = s;
    for (int slot : plan_.output_slots) last_read[static_cast<size_t>(viewed_slot(plan_, slot))] = num_steps;
    for (int s = num_steps - 1; s >= 0; --s) {
      const PlanStep& step = plan_.steps[static_cast<size_t>(s)];
      if (step.needs_runtime_inference || step.schema->sizes_outputs_when_run) continue;
      for (auto [in, out] : step.schema->inplace) {
        if (in >= static_cast<int>(step.inputs.size()) || out >= static_cast<int>(step.outputs.size())) continue;
        const int o = step.outputs[static_cast<size_t>(out)], read = step.inputs[static_cast<size_t>(in)];
        if (o < 0 || read < 0 || slots[static_cast<size_t>(o)].kind != SlotKind::kOutput) continue;
        // The input may be a view (a Reshape of the logits): the bytes it shows are the ones taken.
        const int a = viewed_slot(plan_, read);
        const bool donated = is_donated(a);
        if ((slots[static_cast<size_t>(a)].kind != SlotKind::kArena && !donated) ||
            last_read[static_cast<size_t>(a)] != s || read_twice(step, in) || !same_elements(read, o) ||
            slots[static_cast<size_t>(a)].tensor.nbytes() != slots[static_cast<size_t>(o)].tensor.nbytes())
          continue;
        if (donated) {
          const auto input = std::find(plan_.input_slots.begin(), plan_.input_slots.end(), a);
          plan_.inputs_under_outputs.push_back(static_cast<size_t>(input - plan_.input_slots.begin()));
          under_output_[static_cast<size_t>(a)] = true;
        } else {
          slots[static_cast<size_t>(a)].kind = SlotKind::kOutput;
        }
        slots[static_cast<size_t>(o)].kind = SlotKind::kOverOutput;
        slots[static_cast<size_t>(o)].view_of = a;
        plan_.stats.num_over_outputs++;
        break;
      }
    }
  }

  // Lifetimes over steps, in-place aliases, then offsets from the greedy-by-size planner.
  void assign_memory() {
    auto& slots = plan_.slots;
    const int num_steps = static_cast<int>(plan_.steps.size());
    std::unordered_map<int, int> buffer_of_slot;  // arena slots only
    std::vector<StepUses> uses(static_cast<size_t>(num_steps));
    // A view stands for the slot it views, so reading it keeps that slot's buffer alive. Donated
    // inputs are buffers too (preexisting: no offset), for an in-place op to write over.
    auto buffer_id = [&](int slot) {
      slot = viewed_slot(plan_, slot);
      if (slot < 0 || !(slots[static_cast<size_t>(slot)].kind == SlotKind::kArena || is_bounded(slot) ||
                        is_donated(slot) || in_arena(slot)))
        return -1;
      auto [it, added] = buffer_of_slot.emplace(slot, static_cast<int>(buffer_of_slot.size()));
      return it->second;
    };
    for (int s = 0; s < num_steps; ++s) {
      const PlanStep& step = plan_.steps[static_cast<size_t>(s)];
      for (int slot : step.outputs)
        if (int b = buffer_id(slot); b >= 0) uses[static_cast<size_t>(s)].writes.push_back(b);
      for (int slot : step.inputs)
        if (int b = buffer_id(slot); b >= 0) uses[static_cast<size_t>(s)].reads.push_back(b);
    }
    for (int slot : plan_.input_slots)  // in-arena inputs hold their bytes even when no step reads them
      if (in_arena(slot)) buffer_id(slot);
    const int num_buffers = static_cast<int>(buffer_of_slot.size());
    std::vector<Lifetime> lifetimes = compute_lifetimes(uses, num_buffers, {});
    // Arena outputs outlive the run, in bytes the arena has anyway (optional: else own storage).
    std::vector<bool> arena_output(static_cast<size_t>(num_buffers));
    for (size_t o = 0; o < plan_.output_slots.size(); ++o) {
      auto it = buffer_of_slot.find(viewed_slot(plan_, plan_.output_slots[o]));
      if (it != buffer_of_slot.end() && !plan_.output_consumed[o] &&
          slots[static_cast<size_t>(it->first)].kind == SlotKind::kArena) {
        lifetimes[static_cast<size_t>(it->second)].last_step = num_steps;
        arena_output[static_cast<size_t>(it->second)] = true;
      }
    }
    // A consumed output's buffer lives until it is consumed, and no op writes over it in place.
    std::vector<bool> consumed_buffer(static_cast<size_t>(num_buffers));
    for (const ConsumePoint& c : plan_.consume_points) {
      auto it = buffer_of_slot.find(viewed_slot(plan_, c.slot));
      if (it == buffer_of_slot.end()) continue;  // not arena memory (fresh storage, input, constant)
      Lifetime& life = lifetimes[static_cast<size_t>(it->second)];
      life.last_step = std::max(life.last_step, c.after_step);
      consumed_buffer[static_cast<size_t>(it->second)] = true;
    }
    std::vector<BufferSpec> buffers(static_cast<size_t>(num_buffers));
    for (auto [slot, b] : buffer_of_slot) {
      BufferSpec& spec = buffers[static_cast<size_t>(b)];
      spec.size_bytes = is_bounded(slot) ? slots[static_cast<size_t>(slot)].bound_bytes
                                         : slots[static_cast<size_t>(slot)].tensor.nbytes();
      spec.first_step = lifetimes[static_cast<size_t>(b)].first_step;
      spec.last_step = lifetimes[static_cast<size_t>(b)].last_step;
      spec.preexisting = is_donated(slot);
      spec.optional = arena_output[static_cast<size_t>(b)];
      if (in_arena(slot)) {  // there from the start; its bytes free once its last reader has run
        spec.fixed_offset = options_.inputs_in_arena.at(slots[static_cast<size_t>(slot)].value->name);
        spec.first_step = 0;
        spec.last_step = gives_bytes(slot) ? std::max(spec.last_step, 0) : num_steps;
      }
    }
    for (const ConsumePoint& c : plan_.consume_points) {  // made and consumed one block at a time
      if (c.block_rows == 0) continue;
      const Tensor& whole = slots[static_cast<size_t>(c.slot)].tensor;
      buffers[static_cast<size_t>(buffer_of_slot.at(c.slot))].size_bytes =
          whole.nbytes() / static_cast<size_t>(whole.dim(0)) * static_cast<size_t>(c.block_rows);
    }
    // An output written over a donated input takes no arena block but keeps the input's storage
    // until the output dies; written over an arena input that dies at the same step, it lets the
    // donated input go at once. Which holds fewer bytes depends on where the run peaks (the end of
    // a backward, with every gradient made: the arena is idle and the donated bytes are extra).
    // Donated inputs come first; then, last step first (gradients pile up toward the end), the
    // steps that have the choice are tried the other way, each kept if run_peak drops.
    constexpr int kMaxTrials = 8;
    std::vector<bool> donated_first(static_cast<size_t>(num_steps), true);
    std::vector<int> steps_with_choice;  // filled by the first plan (the choice does not change it)
    const auto plan_with = [&](std::vector<BufferSpec>& candidate, MemoryPlan& planned, int& inplace) {
      candidate = buffers;
      inplace = 0;
      const bool first = steps_with_choice.empty();
      for (int s = 0; s < num_steps; ++s)
        if (add_inplace_aliases(s, candidate, buffer_of_slot, consumed_buffer, donated_first[static_cast<size_t>(s)],
                                inplace) && first)
          steps_with_choice.push_back(s);
      planned = plan_memory(candidate, kTensorAlignment);
      return run_peak(candidate, planned, buffer_of_slot);
    };
    std::vector<BufferSpec> chosen;
    MemoryPlan mem;
    size_t chosen_peak = plan_with(chosen, mem, plan_.stats.num_inplace);
    for (int i = static_cast<int>(steps_with_choice.size()) - 1, tried = 0; i >= 0 && tried < kMaxTrials; --i, ++tried) {
      const size_t s = static_cast<size_t>(steps_with_choice[static_cast<size_t>(i)]);
      donated_first[s] = false;
      std::vector<BufferSpec> candidate;
      MemoryPlan planned;
      int inplace = 0;
      const size_t peak = plan_with(candidate, planned, inplace);
      if (peak < chosen_peak) {
        chosen = std::move(candidate);
        mem = std::move(planned);
        chosen_peak = peak;
        plan_.stats.num_inplace = inplace;
      } else {
        donated_first[s] = true;
      }
    }
    buffers = std::move(chosen);
    move_blocks_over_dead_inputs(buffers, mem, buffer_of_slot, consumed_buffer);
    std::vector<int> slot_of_buffer(static_cast<size_t>(num_buffers));
    for (auto [slot, b] : buffer_of_slot) slot_of_buffer[static_cast<size_t>(b)] = slot;
    for (auto [slot, b] : buffer_of_slot) {
      Slot& home = slots[static_cast<size_t>(slot)];
      if (mem.kinds[static_cast<size_t>(b)] == AllocKind::kNotPlaced) {  // an arena output with no room
        home.kind = SlotKind::kOutput;
        buffers[static_cast<size_t>(b)].preexisting = true;  // out of the arena, for the log below
        continue;
      }
      home.arena_offset = mem.offsets[static_cast<size_t>(b)];
      if (mem.kinds[static_cast<size_t>(b)] == AllocKind::kReuse) plan_.stats.num_reused++;
      if (home.kind != SlotKind::kArena || mem.kinds[static_cast<size_t>(b)] != AllocKind::kPreexisting) continue;
      // In place over a donated input, through a chain of in-place ops, or moved into the bytes of
      // one whose readers are done: show the input's bytes.
      int root = b;
      while (buffers[static_cast<size_t>(root)].alias_of != kNoAlias) root = buffers[static_cast<size_t>(root)].alias_of;
      home.kind = SlotKind::kOverInput;
      const auto moved = moved_over_inputs_.find(root);
      home.view_of = moved == moved_over_inputs_.end() ? slot_of_buffer[static_cast<size_t>(root)]
                                                        : slot_of_buffer[static_cast<size_t>(moved->second.first)];
      home.arena_offset = moved == moved_over_inputs_.end() ? 0 : moved->second.second;
      plan_.stats.num_over_inputs++;
    }
    place_input_releases(buffers, buffer_of_slot, num_steps);
    plan_.stats.arena_bytes = mem.arena_bytes;
    plan_.stats.live_lower_bound = live_bytes_lower_bound(buffers);
    plan_.stats.run_peak_bytes = run_peak(buffers, mem, buffer_of_slot);
    plan_.stats.num_steps = num_steps;
    if (log_enabled(LogLevel::kVerbose)) log_arena_peak(graph_, plan_, buffers, buffer_of_slot);
  }

  // Arena blocks (a buffer and what is written in place over it) moved into the bytes of donated
  // inputs whose last reader has run (plan/dead_input_packing.h: which ones): a backward's late
  // temporaries over the saved values of the layers it is done with.
  void move_blocks_over_dead_inputs(std::vector<BufferSpec>& buffers, MemoryPlan& mem,
                                    const std::unordered_map<int, int>& buffer_of_slot,
                                    const std::vector<bool>& consumed_buffer) {
    const std::unordered_map<int, int> until = last_step_of_roots(buffers);
    std::vector<DeadInput> regions;
    std::vector<int> region_buffer;
    for (const auto& [slot, b] : buffer_of_slot) {
      if (!is_donated(slot) || under_output(slot)) continue;  // an output showing its bytes: never dead
      regions.push_back({plan_.slots[static_cast<size_t>(slot)].tensor.nbytes(), until.at(b)});
      region_buffer.push_back(b);
    }
    if (regions.empty()) return;
    // Consumed outputs, run-time sized values, in-arena inputs and arena outputs stay in the arena.
    std::vector<bool> pinned = consumed_buffer;
    for (const auto& [slot, b] : buffer_of_slot)
      if (is_bounded(slot) || buffers[static_cast<size_t>(b)].fixed_offset != kNoOffset ||
          buffers[static_cast<size_t>(b)].optional)
        pinned[static_cast<size_t>(b)] = true;
    const auto until_of = [&](const std::vector<int>& region_last_steps) {
      std::unordered_map<int, int> u;
      for (size_t r = 0; r < region_buffer.size(); ++r) u[region_buffer[r]] = region_last_steps[r];
      return u;
    };
    DeadInputMoves moves = choose_dead_input_moves(
        buffers, mem, std::move(regions), pinned, static_cast<int>(plan_.steps.size()),
        [&](const std::vector<BufferSpec>& b, const MemoryPlan& m, const std::vector<int>& region_last_steps) {
          dead_input_until_ = until_of(region_last_steps);
          return run_peak(b, m, buffer_of_slot);
        },
        graph_.name);
    buffers = std::move(moves.buffers);
    mem = std::move(moves.mem);
    for (const auto& [root, where] : moves.moved)
      moved_over_inputs_[root] = {region_buffer[static_cast<size_t>(where.region)], where.offset};
    dead_input_until_ = until_of(moves.region_last_steps);
  }

  // Per root buffer of a chain of in-place aliases: the last step touching its bytes (the latest
  // last step of the chain's buffers, reads of views included); for a donated input, also of the
  // blocks moved into its bytes (dead_input_until_).
  std::unordered_map<int, int> last_step_of_roots(const std::vector<BufferSpec>& buffers) const {
    std::unordered_map<int, int> until;
    for (size_t b = 0; b < buffers.size(); ++b) {
      size_t root = b;
      while (buffers[root].alias_of != kNoAlias) root = static_cast<size_t>(buffers[root].alias_of);
      int& last = until.try_emplace(static_cast<int>(root), -1).first->second;
      last = std::max(last, buffers[b].last_step);
    }
    for (const auto& [b, last] : dead_input_until_) until[b] = std::max(until[b], last);
    return until;
  }

  // After which step each donated input's bytes are free: the latest last step of the buffers
  // written in place over them (a chain of aliases rooted at the input's buffer), reads of views
  // included. An input no step touches is released before the first step.
  void place_input_releases(const std::vector<BufferSpec>& buffers, const std::unordered_map<int, int>& buffer_of_slot,
                            int num_steps) {
    const std::unordered_map<int, int> until = last_step_of_roots(buffers);
    for (size_t i = 0; i < plan_.input_slots.size(); ++i) {
      const int slot = plan_.input_slots[i];
      if (!gives_bytes(slot)) continue;
      if (under_output(slot)) continue;  // an output shows its bytes
      auto b = buffer_of_slot.find(slot);
      const int last = b == buffer_of_slot.end() ? -1 : until.at(b->second);
      if (last < num_steps) plan_.input_releases.emplace_back(last, i);
    }
    std::stable_sort(plan_.input_releases.begin(), plan_.input_releases.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  void place_dynamic_releases() {
    const auto& slots = plan_.slots;
    std::unordered_map<int, int> last;  // dynamic slot -> last step touching its bytes
    auto touch = [&](int slot, int step) {
      const int root = viewed_slot(plan_, slot);
      if (root >= 0 && slots[static_cast<size_t>(root)].kind == SlotKind::kDynamic)
        last[root] = std::max(last.try_emplace(root, step).first->second, step);
    };
    for (int s = 0; s < static_cast<int>(plan_.steps.size()); ++s) {
      for (int slot : plan_.steps[static_cast<size_t>(s)].inputs) touch(slot, s);
      for (int slot : plan_.steps[static_cast<size_t>(s)].outputs) touch(slot, s);
    }
    for (const ConsumePoint& c : plan_.consume_points) touch(c.slot, c.after_step);
    for (int slot : plan_.output_slots) last.erase(viewed_slot(plan_, slot));  // handed over after the run
    for (int slot = 0; slot < static_cast<int>(slots.size()); ++slot) {
      auto root = last.find(viewed_slot(plan_, slot));
      if (root != last.end()) plan_.dynamic_releases.emplace_back(root->second, slot);
    }
    std::stable_sort(plan_.dynamic_releases.begin(), plan_.dynamic_releases.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  // Whether another input of `step` shows the same buffer as input `in` (a view of it): an
  // in-place kernel assumes the input it overwrites is the only one in that memory.
  bool read_twice(const PlanStep& step, int in) const {
    const int root = viewed_slot(plan_, step.inputs[static_cast<size_t>(in)]);
    for (size_t i = 0; i < step.inputs.size(); ++i)
      if (static_cast<int>(i) != in && step.inputs[i] >= 0 && viewed_slot(plan_, step.inputs[i]) == root) return true;
    return false;
  }

  // Whether the tensors of slots `a` and `b` have one dtype and the same static dims.
  bool same_elements(int a, int b) const {
    if (a < 0 || b < 0) return false;
    const Tensor& x = plan_.slots[static_cast<size_t>(a)].tensor;
    const Tensor& y = plan_.slots[static_cast<size_t>(b)].tensor;
    return x.dtype() == y.dtype() && x.dims() == y.dims();
  }

  // Whether `slot` is sized at run time within a block the arena plans (Slot::bound_bytes).
  bool is_bounded(int slot) const {
    if (slot < 0) return false;
    const Slot& s = plan_.slots[static_cast<size_t>(slot)];
    return s.kind == SlotKind::kDynamic && s.bound_bytes > 0;
  }

  // Whether `slot` is a graph input the caller donated (PlanOptions::donated_inputs) in storage of
  // its own: an in-arena one is a fixed arena block instead (in_arena).
  bool is_donated(int slot) const { return gives_bytes(slot) && !in_arena(slot); }

  // Whether `slot` is a donated graph input an output is written over (ExecutionPlan::
  // inputs_under_outputs): the caller gets its bytes, so they are held to the run's end.
  bool under_output(int slot) const { return under_output_[static_cast<size_t>(slot)]; }

  // Whether `slot` is a donated graph input, wherever its bytes are.
  bool gives_bytes(int slot) const {
    const Slot& s = plan_.slots[static_cast<size_t>(slot)];
    return s.kind == SlotKind::kInput && options_.donated_inputs.count(s.value->name) > 0 &&
           !is_graph_output(graph_, s.value);
  }

  // Whether `slot` is a graph input whose bytes lie in the arena (PlanOptions::inputs_in_arena).
  bool in_arena(int slot) const {
    const Slot& s = plan_.slots[static_cast<size_t>(slot)];
    return s.kind == SlotKind::kInput && options_.inputs_in_arena.count(s.value->name) > 0;
  }

  // Outputs written over an input whose buffer dies at step `s`, as the op's schema allows, each
  // counted in `inplace`. Donated inputs are tried first or last (`donated_first`): over one, the
  // output takes no arena bytes and an arena input that dies here frees its bytes for what comes
  // next; over an arena input, the donated input is let go here. Returns whether the step had
  // both kinds of input to choose from.
  bool add_inplace_aliases(int s, std::vector<BufferSpec>& buffers, const std::unordered_map<int, int>& buffer_of_slot,
                           const std::vector<bool>& consumed_buffer, bool donated_first, int& inplace) {
    const PlanStep& step = plan_.steps[static_cast<size_t>(s)];
    std::vector<std::pair<int, int>> pairs = step.schema->inplace;
    const auto over_donated = [&](std::pair<int, int> p) {
      return (p.first < static_cast<int>(step.inputs.size()) && step.inputs[static_cast<size_t>(p.first)] >= 0 &&
              is_donated(viewed_slot(plan_, step.inputs[static_cast<size_t>(p.first)]))) == donated_first;
    };
    const auto mixed = std::stable_partition(pairs.begin(), pairs.end(), over_donated);
    const bool choice = mixed != pairs.begin() && mixed != pairs.end();
    std::vector<int> taken;
    for (auto [in, out] : pairs) {
      if (in >= static_cast<int>(step.inputs.size()) || out >= static_cast<int>(step.outputs.size())) continue;
      // A bounded run-time sized value's block may be larger than its tensor: never shared in place.
      if (is_bounded(viewed_slot(plan_, step.inputs[static_cast<size_t>(in)])) ||
          is_bounded(step.outputs[static_cast<size_t>(out)]))
        continue;
      // The kernel reads the input element by element as it writes the output: the same dtype and
      // dims, not only as many bytes (Equal of a broadcast (1, 8) f32 writing a (4, 8) bool mask has
      // 32 bytes each, and would write the mask over the values it still reads).
      if (!same_elements(step.inputs[static_cast<size_t>(in)], step.outputs[static_cast<size_t>(out)])) continue;
      auto bi = buffer_of_slot.find(viewed_slot(plan_, step.inputs[static_cast<size_t>(in)]));
      auto bo = buffer_of_slot.find(step.outputs[static_cast<size_t>(out)]);
      if (bi == buffer_of_slot.end() || bo == buffer_of_slot.end()) continue;
      BufferSpec& src = buffers[static_cast<size_t>(bi->second)];
      BufferSpec& dst = buffers[static_cast<size_t>(bo->second)];
      if (src.optional || dst.optional) continue;  // an arena output's block stands alone
      bool dies_here = src.last_step == s && src.size_bytes == dst.size_bytes && dst.alias_of < 0;
      bool free = std::find(taken.begin(), taken.end(), bi->second) == taken.end() &&
                  !consumed_buffer[static_cast<size_t>(bi->second)];
      if (!dies_here || !free || read_twice(step, in)) continue;
      dst.alias_of = bi->second;
      taken.push_back(bi->second);
      inplace++;
    }
    return choice;
  }

  // The most bytes a run holds at once beyond the caller's inputs and the constants, given the
  // buffers' in-place aliases and their placement: the arena (at least arena_floor_bytes), each
  // donated input until the last step touching the chain written over it (to the end when an
  // output shows its bytes), and each graph output from the step that makes it.
  size_t run_peak(const std::vector<BufferSpec>& buffers, const MemoryPlan& mem,
                  const std::unordered_map<int, int>& buffer_of_slot) const {
    const int num_steps = static_cast<int>(plan_.steps.size());
    std::vector<int64_t> held_from(static_cast<size_t>(num_steps) + 2, 0);  // bytes added (or let go) at step s
    const std::unordered_map<int, int> until = last_step_of_roots(buffers);
    for (auto [slot, b] : buffer_of_slot) {
      if (!is_donated(slot)) continue;
      const auto bytes = static_cast<int64_t>(plan_.slots[static_cast<size_t>(slot)].tensor.nbytes());
      held_from[0] += bytes;
      const int last = under_output(slot) ? num_steps : std::min(until.at(b), num_steps);
      held_from[static_cast<size_t>(last) + 1] -= bytes;
    }
    for (int s = 0; s < num_steps; ++s)
      for (int slot : plan_.steps[static_cast<size_t>(s)].outputs)
        if (slot >= 0 && plan_.slots[static_cast<size_t>(slot)].kind == SlotKind::kOutput)
          held_from[static_cast<size_t>(s)] += static_cast<int64_t>(plan_.slots[static_cast<size_t>(slot)].tensor.nbytes());
    int64_t held = 0, peak = 0;
    for (int64_t change : held_from) peak = std::max(peak, held += change);
    return std::max(mem.arena_bytes, options_.arena_floor_bytes) + static_cast<size_t>(peak);
  }

  const Graph& graph_;
  const PlanOptions& options_;
  ExecutionPlan& plan_;
  // Blocks moved over dead donated inputs: root buffer -> (the input's buffer, byte offset there);
  // per such input's buffer, the last step of the blocks in its bytes.
  std::unordered_map<int, std::pair<int, size_t>> moved_over_inputs_;
  std::unordered_map<int, int> dead_input_until_;
  // Per slot: a donated input an output is written over (set by write_outputs_over_dying_inputs;
  // run_peak asks it for every buffer of every trial plan).
  std::vector<bool> under_output_;
};

}  // namespace

// The slot whose memory `slot` shows: itself, or the end of its chain of views.
int viewed_slot(const ExecutionPlan& plan, int slot) {
  while (slot >= 0 && plan.slots[static_cast<size_t>(slot)].kind == SlotKind::kView)
    slot = plan.slots[static_cast<size_t>(slot)].view_of;
  return slot;
}

void assign_plan_memory(const Graph& graph, const PlanOptions& options, ExecutionPlan& plan) {
  PlanMemoryAssigner(graph, options, plan).assign();
}

}  // namespace trainrt
