#include "trainrt/plan/dead_input_packing.h"

#include <algorithm>
#include <tuple>

#include "trainrt/core/logging.h"

namespace trainrt {

DeadInputPacker::DeadInputPacker(std::vector<DeadInput> regions, size_t alignment)
    : regions_(std::move(regions)), placed_(regions_.size()), alignment_(alignment) {}

int DeadInputPacker::last_step(int region) const {
  int last = regions_[static_cast<size_t>(region)].free_after;
  for (const Placed& p : placed_[static_cast<size_t>(region)]) last = std::max(last, p.block.last_step);
  return last;
}

std::optional<size_t> DeadInputPacker::lowest_offset(int region, const PackedBlock& block) const {
  const DeadInput& r = regions_[static_cast<size_t>(region)];
  if (block.bytes > r.bytes || block.first_step <= r.free_after) return std::nullopt;
  // The placed blocks live at a step the block lives at, by offset: the block goes in the first gap.
  std::vector<const Placed*> overlapping;
  for (const Placed& p : placed_[static_cast<size_t>(region)])
    if (p.block.first_step <= block.last_step && block.first_step <= p.block.last_step) overlapping.push_back(&p);
  std::sort(overlapping.begin(), overlapping.end(), [](const Placed* a, const Placed* b) { return a->offset < b->offset; });
  size_t offset = 0;
  for (const Placed* p : overlapping) {
    if (offset + block.bytes <= p->offset) break;
    offset = std::max(offset, (p->offset + p->block.bytes + alignment_ - 1) / alignment_ * alignment_);
  }
  if (offset + block.bytes > r.bytes) return std::nullopt;
  return offset;
}

std::optional<PackedPlace> DeadInputPacker::find(const PackedBlock& block) const {
  std::optional<PackedPlace> best;
  size_t best_cost = 0, best_bytes = 0;
  for (int r = 0; r < num_regions(); ++r) {
    const std::optional<size_t> offset = lowest_offset(r, block);
    if (!offset) continue;
    const size_t bytes = regions_[static_cast<size_t>(r)].bytes;
    const size_t cost = bytes * static_cast<size_t>(std::max(0, block.last_step - last_step(r)));
    if (!best || cost < best_cost || (cost == best_cost && bytes < best_bytes)) {
      best = PackedPlace{r, *offset};
      best_cost = cost;
      best_bytes = bytes;
    }
  }
  return best;
}

void DeadInputPacker::place(const PackedPlace& where, const PackedBlock& block) {
  placed_[static_cast<size_t>(where.region)].push_back({where.offset, block});
}

DeadInputMoves choose_dead_input_moves(std::vector<BufferSpec> buffers, MemoryPlan mem, std::vector<DeadInput> regions,
                                       const std::vector<bool>& pinned, int num_steps, const RunPeak& run_peak,
                                       std::string_view graph_name) {
  // Alias groups of arena buffers: root -> (bytes, first step, last step).
  const size_t n = buffers.size();
  std::vector<int> root_of(n);
  for (size_t b = 0; b < n; ++b) {
    size_t r = b;
    while (buffers[r].alias_of != kNoAlias) r = static_cast<size_t>(buffers[r].alias_of);
    root_of[b] = static_cast<int>(r);
  }
  std::unordered_map<int, PackedBlock> groups;
  std::vector<bool> pinned_root(n);
  for (size_t b = 0; b < n; ++b) {
    const BufferSpec& root = buffers[static_cast<size_t>(root_of[b])];
    if (root.preexisting) continue;
    auto [it, added] = groups.try_emplace(root_of[b], PackedBlock{root.size_bytes, buffers[b].first_step, buffers[b].last_step});
    it->second.first_step = std::min(it->second.first_step, buffers[b].first_step);
    it->second.last_step = std::max(it->second.last_step, buffers[b].last_step);
    if (b < pinned.size() && pinned[b]) pinned_root[static_cast<size_t>(root_of[b])] = true;
  }
  const auto last_steps = [](const DeadInputPacker& p) {
    std::vector<int> steps;
    for (int r = 0; r < p.num_regions(); ++r) steps.push_back(p.last_step(r));
    return steps;
  };
  struct State {
    std::vector<BufferSpec> buffers;
    MemoryPlan mem;
    DeadInputPacker packer;
    std::unordered_map<int, PackedPlace> moved;
    size_t peak;
  };
  DeadInputPacker packer(std::move(regions), kTensorAlignment);
  const size_t start_peak = run_peak(buffers, mem, last_steps(packer));
  State now{std::move(buffers), std::move(mem), std::move(packer), {}, start_peak};
  State best = now;
  std::vector<bool> tried(n);
  constexpr int kMaxTrials = 64;
  for (int trial = 0; trial < kMaxTrials;) {
    // The busiest step of the blocks still in the arena, and the blocks live there, largest first.
    std::vector<size_t> live(static_cast<size_t>(num_steps) + 1);
    for (const auto& [root, g] : groups)
      if (!now.buffers[static_cast<size_t>(root)].preexisting)
        for (int s = g.first_step; s <= std::min(g.last_step, num_steps); ++s) live[static_cast<size_t>(s)] += g.bytes;
    const int busiest = static_cast<int>(std::max_element(live.begin(), live.end()) - live.begin());
    std::vector<int> candidates;
    for (const auto& [root, g] : groups)
      if (!now.buffers[static_cast<size_t>(root)].preexisting && !pinned_root[static_cast<size_t>(root)] &&
          !tried[static_cast<size_t>(root)] && g.bytes > 0 && g.first_step <= busiest && busiest <= g.last_step)
        candidates.push_back(root);
    std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
      return std::tie(groups.at(b).bytes, a) < std::tie(groups.at(a).bytes, b);
    });
    bool moved = false;
    for (int root : candidates) {
      if (trial >= kMaxTrials) break;
      tried[static_cast<size_t>(root)] = true;
      const PackedBlock& block = groups.at(root);
      const std::optional<PackedPlace> where = now.packer.find(block);
      if (!where) continue;
      ++trial;
      State next{now.buffers, {}, now.packer, now.moved, 0};
      next.buffers[static_cast<size_t>(root)].preexisting = true;
      next.mem = plan_memory(next.buffers, kTensorAlignment);
      next.packer.place(*where, block);
      next.moved[root] = *where;
      next.peak = run_peak(next.buffers, next.mem, last_steps(next.packer));
      if (log_enabled(LogLevel::kVerbose))
        TRAINRT_LOG(kVerbose) << "graph '" << graph_name << "': buffer " << root << " (" << block.bytes
                              << " bytes, steps " << block.first_step << "-" << block.last_step
                              << ") into a dead input's bytes: run peak " << now.peak << " -> " << next.peak
                              << (next.peak <= now.peak ? "" : ", not taken");
      if (next.peak > now.peak) continue;
      now = std::move(next);
      if (now.peak < best.peak) best = now;
      moved = true;
      break;
    }
    if (!moved) break;
  }
  return {std::move(best.buffers), std::move(best.mem), std::move(best.moved), last_steps(best.packer)};
}

}  // namespace trainrt
