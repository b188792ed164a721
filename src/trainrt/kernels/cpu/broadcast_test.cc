// BroadcastPlan: how shapes collapse into rows, and that runs over any sub-range give the same
// input offsets as plain index arithmetic.
#include "trainrt/kernels/cpu/broadcast.h"

#include <gtest/gtest.h>

#include <random>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"

namespace trainrt {
namespace {

using Dims = std::vector<int64_t>;

TEST(BroadcastPlan, CollapsesCommonTrainingPatterns) {
  const Dims btc = {8, 16, 32};
  {
    const Dims c = {32};
    BroadcastPlan p({&btc, &c}, btc);  // bias add: rows of C, bias contiguous
    EXPECT_EQ(p.inner(), 32);
    EXPECT_EQ(p.inner_stride(0), 1);
    EXPECT_EQ(p.inner_stride(1), 1);
  }
  {
    const Dims bt1 = {8, 16, 1};
    BroadcastPlan p({&btc, &bt1}, btc);  // per-row scale: one value per row
    EXPECT_EQ(p.inner(), 32);
    EXPECT_EQ(p.inner_stride(1), 0);
  }
  {
    BroadcastPlan p({&btc, &btc}, btc);  // same shape: a single row
    EXPECT_EQ(p.inner(), 8 * 16 * 32);
    int runs = 0;
    p.for_each_run(0, p.numel(), [&](const int64_t*, int64_t, int64_t len) {
      ++runs;
      EXPECT_EQ(len, p.numel());
    });
    EXPECT_EQ(runs, 1);
  }
  {
    const Dims scalar = {};
    BroadcastPlan p({&scalar, &btc}, btc);
    EXPECT_EQ(p.inner(), 8 * 16 * 32);
    EXPECT_EQ(p.inner_stride(0), 0);
  }
  {
    const Dims a = {4, 1}, b = {1, 5}, out = {4, 5};
    BroadcastPlan p({&a, &b}, out);  // outer product
    EXPECT_EQ(p.inner(), 5);
    EXPECT_EQ(p.inner_stride(0), 0);
    EXPECT_EQ(p.inner_stride(1), 1);
  }
}

TEST(BroadcastPlan, RejectsShapesThatDoNotBroadcast) {
  const Dims a = {3}, b = {4}, ab = {2, 3, 4};
  EXPECT_THROW(BroadcastPlan({&a}, b), ShapeError);
  EXPECT_THROW(BroadcastPlan({&ab}, a), ShapeError);
}

// Input k's offset of output element i, by unravelling i (the definition of broadcasting).
int64_t naive_offset(const Dims& in, const Dims& out, int64_t i) {
  int64_t offset = 0, stride = 1;
  for (size_t back = 0; back < out.size(); ++back) {
    const int64_t size = out[out.size() - 1 - back];
    const int64_t idx = i % size;
    i /= size;
    if (back >= in.size()) continue;
    const int64_t in_size = in[in.size() - 1 - back];
    offset += (in_size == 1 ? 0 : idx) * stride;
    stride *= in_size;
  }
  return offset;
}

TEST(BroadcastPlan, RunsMatchIndexArithmeticOnRandomShapesAndRanges) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t rank = rng() % 5;
    Dims out(rank);
    for (int64_t& d : out) d = 1 + static_cast<int64_t>(rng() % 4);
    std::vector<Dims> ins(1 + rng() % 3);
    for (Dims& in : ins) {
      const size_t r = rng() % (rank + 1);
      for (size_t j = 0; j < r; ++j) in.push_back(rng() % 2 ? out[rank - r + j] : 1);
    }
    std::vector<const Dims*> ptrs;
    for (const Dims& in : ins) ptrs.push_back(&in);
    BroadcastPlan p(ptrs, out);
    const int64_t n = numel_of(out);
    const int64_t begin = static_cast<int64_t>(rng() % static_cast<uint32_t>(n + 1));
    const int64_t end = begin + static_cast<int64_t>(rng() % static_cast<uint32_t>(n - begin + 1));
    int64_t next = begin;
    p.for_each_run(begin, end, [&](const int64_t* off, int64_t o, int64_t len) {
      ASSERT_EQ(o, next);
      ASSERT_GT(len, 0);
      for (int64_t j = 0; j < len; ++j)
        for (size_t k = 0; k < ins.size(); ++k)
          ASSERT_EQ(off[k] + j * p.inner_stride(static_cast<int>(k)), naive_offset(ins[k], out, o + j))
              << "trial " << trial << " input " << k << " " << to_string(ins[k]) << " -> " << to_string(out);
      next += len;
    });
    EXPECT_EQ(next, end);
  }
}

}  // namespace
}  // namespace trainrt
