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
// block live at an overlapping step uses. Which blocks to move is the caller's choice
// (execution_plan.cc: the busiest step's largest, kept when the run's peak drops).
//
//   DeadInputPacker packer({{.bytes = 4096, .free_after = 2}}, 64);
//   if (auto where = packer.find({.bytes = 1024, .first_step = 5, .last_step = 7}))
//     packer.place(*where, {1024, 5, 7});   // region 0, offset 0; region 0 now held through step 7
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

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

}  // namespace trainrt
