// Packing arena blocks into the bytes of donated inputs whose readers are done.
//
// A backward program's inputs are the values its forward saved, donated: once the last step
// reading one has run, its bytes are free until the run ends (Session::run_releasing lets go of
// it there). The backward's late steps (the first layers' gradients, where its arena peaks) can
// write their temporaries into those bytes instead of arena bytes, as eager's caching allocator
// hands a freed activation's block to the next gradient. The input is then let go after the
// last step of the blocks written over it, not after its own last reader.
//
// The packer knows the dead inputs (regions) and the blocks placed in each; it finds where a block
// fits: an aligned offset of a region dead before the block's first step, whose bytes no placed
// block live at an overlapping step uses. choose_dead_input_moves decides which blocks move.
//
//   DeadInputPacker packer({{.bytes = 4096, .free_after = 2}}, 64);
//   if (auto where = packer.find({.bytes = 1024, .first_step = 5, .last_step = 7}))
//     packer.place(*where, {1024, 5, 7});   // region 0, offset 0; region 0 now held through step 7
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainrt/plan/memory_plan.h"

namespace trainrt {

struct DeadInput {
  size_t bytes = 0;
  int free_after = -1;  // the last step touching its bytes (-1: none does)
};

struct PackedBlock {
  size_t bytes = 0;
  int first_step = 0;
  int last_step = 0;  // inclusive
};

struct PackedPlace {
  int region = 0;
  size_t offset = 0;
};

class DeadInputPacker {
 public:
  DeadInputPacker(std::vector<DeadInput> regions, size_t alignment);

  // Where `block` fits, or nothing. Among the regions it fits, the one whose bytes it keeps alive
  // the fewest extra byte-steps (one already held past the block's last step costs none; ties: the
  // smaller region); the lowest offset there.
  std::optional<PackedPlace> find(const PackedBlock& block) const;
  void place(const PackedPlace& where, const PackedBlock& block);

  // The last step touching region r's bytes: its own readers' or a placed block's.
  int last_step(int region) const;
  int num_regions() const { return static_cast<int>(regions_.size()); }

 private:
  struct Placed {
    size_t offset;
    PackedBlock block;
  };
  std::optional<size_t> lowest_offset(int region, const PackedBlock& block) const;

  std::vector<DeadInput> regions_;
  std::vector<std::vector<Placed>> placed_;  // per region
  size_t alignment_;
};

// Which arena blocks (alias groups of `buffers`, by root) move into the dead inputs `regions`.
// Greedy: at the busiest step of the blocks still in the arena, the largest block that fits moves
// when `run_peak` does not rise, until no block there moves (at most 64 trial plans); the moves up
// to the lowest run_peak seen are kept. Several steps may share the busiest level (each layer's
// attention backward), so one move alone may lower no peak. A block with a `pinned` member (a
// consumed output, a run-time sized value) stays.
//   run_peak(buffers, plan, per region the last step touching it): the run's peak with those.
struct DeadInputMoves {
  std::vector<BufferSpec> buffers;                  // each moved block's root marked preexisting
  MemoryPlan mem;                                   // the arena without the moved blocks
  std::unordered_map<int, PackedPlace> moved;       // root buffer -> where it went
  std::vector<int> region_last_steps;               // per region: the last step touching its bytes
};
using RunPeak = std::function<size_t(const std::vector<BufferSpec>&, const MemoryPlan&, const std::vector<int>&)>;
DeadInputMoves choose_dead_input_moves(std::vector<BufferSpec> buffers, MemoryPlan mem, std::vector<DeadInput> regions,
                                       const std::vector<bool>& pinned, int num_steps, const RunPeak& run_peak,
                                       std::string_view graph_name);

}  // namespace trainrt
