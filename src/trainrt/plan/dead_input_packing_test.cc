#include "trainrt/plan/dead_input_packing.h"

#include <gtest/gtest.h>

namespace trainrt {
namespace {

TEST(DeadInputPacking, ABlockGoesOnlyWhereTheInputIsDeadAndLargeEnough) {
  DeadInputPacker packer({{.bytes = 4096, .free_after = 5}}, 64);
  EXPECT_FALSE(packer.find({.bytes = 1024, .first_step = 5, .last_step = 9})) << "the input's last reader runs at 5";
  EXPECT_FALSE(packer.find({.bytes = 4097, .first_step = 6, .last_step = 9})) << "larger than the input";
  const auto where = packer.find({.bytes = 4096, .first_step = 6, .last_step = 9});
  ASSERT_TRUE(where);
  EXPECT_EQ(where->region, 0);
  EXPECT_EQ(where->offset, 0u);
}

TEST(DeadInputPacking, BlocksShareARegionByOffsetWhileLiveAndByTimeAfter) {
  DeadInputPacker packer({{.bytes = 4096, .free_after = 0}}, 64);
  packer.place({0, 0}, {.bytes = 1000, .first_step = 1, .last_step = 4});
  const auto beside = packer.find({.bytes = 2000, .first_step = 3, .last_step = 6});
  ASSERT_TRUE(beside);
  EXPECT_EQ(beside->offset, 1024u) << "after the live block, aligned";
  packer.place(*beside, {2000, 3, 6});
  EXPECT_FALSE(packer.find({.bytes = 2000, .first_step = 4, .last_step = 5})) << "1072 bytes left while both live";
  const auto later = packer.find({.bytes = 1024, .first_step = 5, .last_step = 8});
  ASSERT_TRUE(later);
  EXPECT_EQ(later->offset, 0u) << "the first block is dead by then";
  EXPECT_EQ(packer.last_step(0), 6);
}

TEST(DeadInputPacking, PrefersTheRegionItKeepsAliveTheLeast) {
  DeadInputPacker packer({{.bytes = 8192, .free_after = 1}, {.bytes = 4096, .free_after = 2}, {.bytes = 4096, .free_after = 9}}, 64);
  // Region 2 is held until 9 anyway but dies too late for a block from 3; region 1 costs 4096 x 5
  // byte-steps, region 0 8192 x 5.
  auto where = packer.find({.bytes = 2048, .first_step = 3, .last_step = 7});
  ASSERT_TRUE(where);
  EXPECT_EQ(where->region, 1);
  packer.place(*where, {2048, 3, 7});
  where = packer.find({.bytes = 2048, .first_step = 4, .last_step = 6});  // beside it: no extra cost
  ASSERT_TRUE(where);
  EXPECT_EQ(where->region, 1);
  EXPECT_EQ(where->offset, 2048u);
}

}  // namespace
}  // namespace trainrt
