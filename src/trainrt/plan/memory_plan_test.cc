#include "trainrt/plan/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/plan/lifetimes.h"

namespace trainrt {
namespace {

// Buffers from a schedule, as a session builds them: a size per buffer, lifetimes from the steps.
std::vector<BufferSpec> buffers_from(const std::vector<size_t>& sizes,
                                     const std::vector<StepUses>& steps,
                                     const std::vector<int>& outliving = {}) {
  std::vector<Lifetime> life = compute_lifetimes(steps, static_cast<int>(sizes.size()), outliving);
  std::vector<BufferSpec> buffers(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers[i] = {.size_bytes = sizes[i],
                  .first_step = life[i].first_step,
                  .last_step = life[i].last_step};
  }
  return buffers;
}

TEST(Lifetimes, FirstAndLastUseOutlivingAndUnused) {
  // s0: a = f(x)   s1: b = g(a)   s2: c = h(a, b); c is an output, d is never used.
  enum { x, a, b, c, d, kCount };
  std::vector<StepUses> steps = {{{x}, {a}}, {{a}, {b}}, {{a, b}, {c}}};
  std::vector<Lifetime> life = compute_lifetimes(steps, kCount, /*outliving=*/std::vector<int>{c});
  EXPECT_EQ(life[x].first_step, 0);
  EXPECT_EQ(life[x].last_step, 0);
  EXPECT_EQ(life[a].first_step, 0);
  EXPECT_EQ(life[a].last_step, 2);
  EXPECT_EQ(life[b].first_step, 1);
  EXPECT_EQ(life[b].last_step, 2);
  EXPECT_EQ(life[c].first_step, 2);
  EXPECT_EQ(life[c].last_step, 3);  // past the last step
  EXPECT_EQ(life[d].first_step, kNeverUsed);
  EXPECT_EQ(life[d].last_step, kNeverUsed);
}

TEST(Lifetimes, OutOfRangeIdNamesTheStep) {
  std::vector<StepUses> steps = {{{0}, {1}}, {{1}, {7}}};
  try {
    compute_lifetimes(steps, 2, {});
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("write of buffer 7 at step 1"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryPlan, ChainReusesDeadMemory) {
  // s0: a = f()   s1: b = g(a)   s2: c = h(b)   s3: d = k(c): c takes a's memory, d takes b's.
  std::vector<StepUses> steps = {{{}, {0}}, {{0}, {1}}, {{1}, {2}}, {{2}, {3}}};
  std::vector<BufferSpec> buffers = buffers_from({1000, 1000, 1000, 1000}, steps);
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<size_t>{0, 1024, 0, 1024}));
  EXPECT_EQ(plan.kinds, (std::vector<AllocKind>{AllocKind::kAllocate, AllocKind::kAllocate,
                                                AllocKind::kReuse, AllocKind::kReuse}));
  EXPECT_EQ(plan.arena_bytes, 2024u);  // 1000 at 0, 1000 at 1024 (the next multiple of 64)
  EXPECT_EQ(live_bytes_lower_bound(buffers), 2000u);
}

TEST(MemoryPlan, HeaderExample) {
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 4096, .preexisting = true},
      {.size_bytes = 4096, .first_step = 0, .last_step = 1},
      {.size_bytes = 4096, .first_step = 1, .last_step = 2},
      {.size_bytes = 4096, .first_step = 2, .last_step = 3},
      {.size_bytes = 4096, .first_step = 3, .last_step = 4, .alias_of = 3},
  };
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.kinds, (std::vector<AllocKind>{AllocKind::kPreexisting, AllocKind::kAllocate,
                                                AllocKind::kAllocate, AllocKind::kReuse,
                                                AllocKind::kShare}));
  EXPECT_EQ(plan.offsets[3], plan.offsets[1]);
  EXPECT_EQ(plan.offsets[4], plan.offsets[3]);
  EXPECT_EQ(plan.arena_bytes, 8192u);
}

TEST(MemoryPlan, InPlaceShareGetsSameOffsetAndExtendsLifetime) {
  // a [0,1]; b = relu_(a) in place [1,3]; c [2,2] must avoid a's memory although a died at 1;
  // d = relu_(b) [3,4], a chain of aliases; e [4,4] must avoid it too.
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 512, .first_step = 0, .last_step = 1},
      {.size_bytes = 512, .first_step = 1, .last_step = 3, .alias_of = 0},
      {.size_bytes = 512, .first_step = 2, .last_step = 2},
      {.size_bytes = 256, .first_step = 3, .last_step = 4, .alias_of = 1},
      {.size_bytes = 512, .first_step = 4, .last_step = 4},
  };
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[3], plan.offsets[0]);
  EXPECT_NE(plan.offsets[2], plan.offsets[0]);
  EXPECT_NE(plan.offsets[4], plan.offsets[0]);
  EXPECT_EQ(plan.kinds[1], AllocKind::kShare);
  EXPECT_EQ(plan.kinds[3], AllocKind::kShare);
  EXPECT_EQ(plan.kinds[4], AllocKind::kReuse);  // over c, dead since step 2
  EXPECT_EQ(plan.arena_bytes, 1024u);
  EXPECT_EQ(live_bytes_lower_bound(buffers), 1024u);  // the group counts once
}

TEST(MemoryPlan, RejectsBadAliases) {
  auto plan_of = [](std::vector<BufferSpec> buffers) { return plan_memory(buffers); };
  // Larger than the buffer it overwrites.
  EXPECT_THROW(plan_of({{.size_bytes = 8}, {.size_bytes = 16, .alias_of = 0}}), InternalError);
  // A cycle, out of range, itself.
  EXPECT_THROW(plan_of({{.size_bytes = 8, .alias_of = 1}, {.size_bytes = 8, .alias_of = 0}}),
               InternalError);
  EXPECT_THROW(plan_of({{.size_bytes = 8, .alias_of = 5}}), InternalError);
  EXPECT_THROW(plan_of({{.size_bytes = 8, .alias_of = 0}}), InternalError);
  // A preexisting buffer owns its memory; an empty lifetime is a caller bug.
  EXPECT_THROW(plan_of({{.size_bytes = 8}, {.size_bytes = 8, .alias_of = 0, .preexisting = true}}),
               InternalError);
  EXPECT_THROW(plan_of({{.size_bytes = 8, .first_step = kNeverUsed, .last_step = kNeverUsed}}),
               InternalError);
  EXPECT_THROW(plan_memory(std::vector<BufferSpec>{{.size_bytes = 8}}, /*alignment=*/48),
               InternalError);
}

TEST(MemoryPlan, ZeroSizeBuffersTakeNoBytes) {
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 0, .first_step = 0, .last_step = 3},
      {.size_bytes = 100, .first_step = 0, .last_step = 3},
      {.size_bytes = 0, .first_step = 1, .last_step = 2, .alias_of = 0},
      {.size_bytes = 0, .first_step = 2, .last_step = 2},
  };
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_EQ(plan.kinds, (std::vector<AllocKind>{AllocKind::kAllocate, AllocKind::kAllocate,
                                                AllocKind::kShare, AllocKind::kAllocate}));
  EXPECT_EQ(plan.arena_bytes, 100u);
  EXPECT_EQ(plan_memory(std::vector<BufferSpec>{{.size_bytes = 0}}).arena_bytes, 0u);
  EXPECT_EQ(plan_memory(std::vector<BufferSpec>{}).arena_bytes, 0u);
}

TEST(MemoryPlan, OddSizesStayAligned) {
  // All live together; largest first: 65 at 0, 3 at 128, 1 at 192.
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 1, .first_step = 0, .last_step = 1},
      {.size_bytes = 3, .first_step = 0, .last_step = 1},
      {.size_bytes = 65, .first_step = 0, .last_step = 1},
  };
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<size_t>{192, 128, 0}));
  EXPECT_EQ(plan.arena_bytes, 193u);
  MemoryPlan plan16 = plan_memory(buffers, /*alignment=*/16);
  EXPECT_EQ(plan16.offsets, (std::vector<size_t>{96, 80, 0}));
  EXPECT_EQ(plan16.arena_bytes, 97u);
}

TEST(MemoryPlan, PreexistingBuffersAreNotInTheArena) {
  // x: a graph input; w: a parameter updated in place by the optimizer (w_new aliases w).
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 1 << 20, .preexisting = true},
      {.size_bytes = 4096, .preexisting = true},
      {.size_bytes = 4096, .first_step = 0, .last_step = 1},
      {.size_bytes = 4096, .first_step = 1, .last_step = 2, .alias_of = 1},
  };
  MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<size_t>{kNoOffset, kNoOffset, 0, kNoOffset}));
  EXPECT_EQ(plan.kinds, (std::vector<AllocKind>{AllocKind::kPreexisting, AllocKind::kPreexisting,
                                                AllocKind::kAllocate, AllocKind::kPreexisting}));
  EXPECT_EQ(plan.arena_bytes, 4096u);
  EXPECT_EQ(live_bytes_lower_bound(buffers), 4096u);
}

// A random program: a few graph inputs, then steps each reading 1-3 earlier buffers (mostly recent
// ones, sometimes any: random fan-out and lifetimes) and writing 1-2 new ones of 0..1 MiB. Some
// outputs overwrite an input in place; some outlive the program.
std::vector<BufferSpec> random_program(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  std::vector<size_t> sizes;
  std::vector<int> alias_of;
  std::vector<bool> overwritten;  // already the target of an in-place write
  auto new_buffer = [&] {
    sizes.push_back(chance(0.05) ? 0 : static_cast<size_t>(uniform(1, 1 << 20)));
    alias_of.push_back(kNoAlias);
    overwritten.push_back(false);
    return static_cast<int>(sizes.size()) - 1;
  };
  const int num_inputs = uniform(1, 4);
  for (int i = 0; i < num_inputs; ++i) new_buffer();
  std::vector<StepUses> steps(static_cast<size_t>(uniform(5, 80)));
  std::vector<int> outliving;
  for (StepUses& step : steps) {
    const int n = static_cast<int>(sizes.size());
    for (int k = uniform(1, 3); k > 0; --k) {
      step.reads.push_back(uniform(chance(0.7) ? std::max(0, n - 6) : 0, n - 1));
    }
    for (int k = uniform(1, 2); k > 0; --k) {
      const int out = new_buffer();
      step.writes.push_back(out);
      if (chance(0.1)) outliving.push_back(out);
      const int in = step.reads.front();
      if (k == 1 && in >= num_inputs && !overwritten[in] && chance(0.3)) {
        overwritten[in] = true;
        alias_of[out] = in;
        sizes[out] = std::min(sizes[out], sizes[in]);
      }
    }
  }
  std::vector<BufferSpec> buffers = buffers_from(sizes, steps, outliving);
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
    buffers[i].alias_of = alias_of[i];
    buffers[i].preexisting = i < num_inputs;
  }
  return buffers;
}

// Per buffer: the root of its alias chain and the lifetime of its whole group, computed here
// independently of the planner.
struct GroupLife {
  int root = 0;
  int first_step = std::numeric_limits<int>::max();
  int last_step = std::numeric_limits<int>::min();
};

std::vector<GroupLife> group_lives(const std::vector<BufferSpec>& buffers) {
  std::vector<GroupLife> lives(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    int r = static_cast<int>(i);
    while (buffers[r].alias_of != kNoAlias) r = buffers[r].alias_of;
    lives[i].root = r;
    lives[r].first_step = std::min(lives[r].first_step, buffers[i].first_step);
    lives[r].last_step = std::max(lives[r].last_step, buffers[i].last_step);
  }
  for (GroupLife& life : lives) {
    life.first_step = lives[life.root].first_step;
    life.last_step = lives[life.root].last_step;
  }
  return lives;
}

bool bytes_overlap(size_t offset_a, size_t size_a, size_t offset_b, size_t size_b) {
  return offset_a < offset_b + size_b && offset_b < offset_a + size_a;
}

// The plan's invariants, over every buffer and every pair of buffers (ASSERTs: stops at the first).
void check_plan(const std::vector<BufferSpec>& buffers, const MemoryPlan& plan, size_t alignment) {
  const std::vector<GroupLife> lives = group_lives(buffers);
  auto external = [&](size_t i) { return buffers[lives[i].root].preexisting; };
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  ASSERT_EQ(plan.kinds.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    ASSERT_EQ(plan.kinds[i] == AllocKind::kPreexisting, external(i)) << "buffer " << i;
    if (external(i)) continue;
    const size_t offset = plan.offsets[i], size = buffers[i].size_bytes;
    ASSERT_EQ(offset % alignment, 0u) << "buffer " << i;
    ASSERT_LE(offset + size, plan.arena_bytes) << "buffer " << i;
    ASSERT_EQ(offset, plan.offsets[lives[i].root]) << "buffer " << i;
    bool covers_dead = false;  // overlaps in memory a group that died before this one was born
    for (size_t j = 0; j < buffers.size(); ++j) {
      if (j == i || external(j) || lives[j].root == lives[i].root) continue;
      const bool share_bytes = bytes_overlap(offset, size, plan.offsets[j], buffers[j].size_bytes);
      const bool live_together =
          lives[i].first_step <= lives[j].last_step && lives[j].first_step <= lives[i].last_step;
      ASSERT_FALSE(live_together && share_bytes) << "buffers " << i << " and " << j;
      covers_dead |= share_bytes && lives[j].last_step < lives[i].first_step;
    }
    const AllocKind expected = buffers[i].alias_of != kNoAlias ? AllocKind::kShare
                               : covers_dead                   ? AllocKind::kReuse
                                                               : AllocKind::kAllocate;
    ASSERT_EQ(plan.kinds[i], expected) << "buffer " << i;
  }
}

// A saved value the forward left in the arena: it stays where it is, the others keep out of its
// bytes while it lives and take them after.
TEST(MemoryPlan, FixedBuffersStayWhereTheyAreAndFreeTheirBytesWhenDead) {
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 4096, .first_step = 0, .last_step = 0, .fixed_offset = 8192},  // 0: saved, read at s0
      {.size_bytes = 8192, .first_step = 0, .last_step = 1},                         // 1: live beside it
      {.size_bytes = 12288, .first_step = 2, .last_step = 3},                        // 2: after both died
      {.size_bytes = 4096, .first_step = 1, .last_step = 1, .alias_of = 0},          // 3: in place over 0
  };
  MemoryPlan plan = plan_memory(buffers, 64);
  EXPECT_EQ(plan.offsets[0], 8192u);
  EXPECT_EQ(plan.offsets[3], 8192u);  // shares the fixed block, which now lives until s1
  EXPECT_EQ(plan.kinds[3], AllocKind::kShare);
  EXPECT_EQ(plan.offsets[1], 0u);     // below it: 8192 bytes fit there
  EXPECT_EQ(plan.offsets[2], 0u);     // over both, dead by s2
  EXPECT_EQ(plan.kinds[2], AllocKind::kReuse);
  EXPECT_EQ(plan.arena_bytes, 12288u);
}

// Saved values in the bytes a forward's early intermediates leave idle: placed where they fit
// below the others' end, never growing the arena.
TEST(MemoryPlan, OptionalBuffersFitBelowTheOthersOrNowhere) {
  std::vector<BufferSpec> buffers = {
      {.size_bytes = 8192, .first_step = 0, .last_step = 1},                     // 0: the early peak
      {.size_bytes = 4096, .first_step = 2, .last_step = 3},                     // 1: a later intermediate
      {.size_bytes = 4096, .first_step = 2, .last_step = 4, .optional = true},   // 2: saved: fits beside 1
      {.size_bytes = 4096, .first_step = 1, .last_step = 4, .optional = true},   // 3: saved: 0 is live at s1
      {.size_bytes = 0, .first_step = 0, .last_step = 4, .optional = true},      // 4: empty
  };
  MemoryPlan plan = plan_memory(buffers, 64);
  EXPECT_EQ(plan.arena_bytes, 8192u);
  EXPECT_EQ(plan.offsets[1], 0u);
  EXPECT_EQ(plan.offsets[2], 4096u);
  EXPECT_EQ(plan.kinds[2], AllocKind::kReuse);  // over the early peak's bytes
  EXPECT_EQ(plan.offsets[3], kNoOffset);
  EXPECT_EQ(plan.kinds[3], AllocKind::kNotPlaced);
  EXPECT_EQ(live_bytes_lower_bound(buffers), 8192u);
  buffers.push_back({.size_bytes = 4096, .first_step = 3, .last_step = 3, .alias_of = 2});
  EXPECT_THROW(plan_memory(buffers, 64), InternalError);
}

TEST(MemoryPlan, RejectsBadFixedOffsets) {
  std::vector<BufferSpec> misaligned = {{.size_bytes = 64, .first_step = 0, .last_step = 0, .fixed_offset = 32}};
  EXPECT_THROW(plan_memory(misaligned, 64), InternalError);
  std::vector<BufferSpec> overlapping = {
      {.size_bytes = 128, .first_step = 0, .last_step = 2, .fixed_offset = 0},
      {.size_bytes = 128, .first_step = 1, .last_step = 1, .fixed_offset = 64},
  };
  EXPECT_THROW(plan_memory(overlapping, 64), InternalError);
  overlapping[1].first_step = overlapping[1].last_step = 3;  // not live at the same time: fine
  EXPECT_EQ(plan_memory(overlapping, 64).arena_bytes, 192u);
  std::vector<BufferSpec> fixed_alias = {
      {.size_bytes = 64, .first_step = 0, .last_step = 0},
      {.size_bytes = 64, .first_step = 0, .last_step = 1, .alias_of = 0, .fixed_offset = 0},
  };
  EXPECT_THROW(plan_memory(fixed_alias, 64), InternalError);
}

TEST(MemoryPlan, RandomProgramsArePlannedSafely) {
  constexpr int kPrograms = 400;
  constexpr size_t kAlignment = 64;
  double ratio_sum = 0, ratio_max = 0;
  int ratio_count = 0;
  for (int seed = 0; seed < kPrograms; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const std::vector<BufferSpec> buffers = random_program(rng);
    const MemoryPlan plan = plan_memory(buffers, kAlignment);
    check_plan(buffers, plan, kAlignment);
    if (HasFatalFailure()) return;
    const size_t bound = live_bytes_lower_bound(buffers);
    ASSERT_GE(plan.arena_bytes, bound);
    if (bound == 0) continue;
    const double ratio = static_cast<double>(plan.arena_bytes) / static_cast<double>(bound);
    ratio_sum += ratio;
    ratio_max = std::max(ratio_max, ratio);
    ++ratio_count;
  }
  std::printf("[ planner  ] %d random programs: arena / live-bytes lower bound: "
              "mean %.4f, max %.4f\n",
              ratio_count, ratio_sum / ratio_count, ratio_max);
}

}  // namespace
}  // namespace trainrt
