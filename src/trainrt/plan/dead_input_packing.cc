#include "trainrt/plan/dead_input_packing.h"

#include <algorithm>

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

}  // namespace trainrt
