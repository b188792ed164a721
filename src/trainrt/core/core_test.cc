// Core: dtypes and their conversions, symbolic shapes and broadcasting, tensors, arena, thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "trainrt/core/arena.h"
#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_budget.h"
#include "trainrt/core/thread_pool.h"
#include <mutex>
#include <set>
#include <thread>

namespace trainrt {
namespace {

TEST(DType, SizesNamesAndOnnxCodesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32, DType::kI8,
                  DType::kU8, DType::kBool})
    EXPECT_EQ(dtype_from_onnx(dtype_to_onnx(t)), t) << dtype_name(t);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  try {
    dtype_from_onnx(8);
    FAIL();
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("STRING"), std::string::npos);
  }
}

TEST(DType, HalfAndBfloat16ConversionsRoundToNearestEven) {
  for (float f : {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 1e-3f, 3.14159f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f16_to_f32(f32_to_f16(f16_to_f32(f32_to_f16(f))))) << f;
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.f)), 1.f);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);          // rounds up to +inf
  EXPECT_EQ(f32_to_f16(1.f + 1.f / 2048), 0x3c00);  // a tie rounds to even (1.0)
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f)), 1.f);
  EXPECT_EQ(f32_to_bf16(1.f + 1.f / 256), 0x3f80);  // tie to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Shape, BroadcastKeepsSymbolsAndNamesBadPairs) {
  Shape a({Dim::symbolic("batch"), 1, 4});
  Shape b({3, 4});
  EXPECT_EQ(to_string(broadcast_shapes(a, b)), "(batch, 3, 4)");
  EXPECT_EQ(to_string(broadcast_shapes(Shape({Dim::symbolic("t")}), Shape({Dim::symbolic("t")}))), "(t)");
  EXPECT_FALSE(broadcast_shapes(Shape({Dim::symbolic("a")}), Shape({Dim::symbolic("b")})).dims[0].is_static());
  EXPECT_THROW(broadcast_shapes(Shape({2, 3}), Shape({4})), ShapeError);
  EXPECT_EQ(broadcast_dims({5, 1, 3}, {4, 1}), (std::vector<int64_t>{5, 4, 3}));
  EXPECT_EQ(normalize_axis(-1, 3), 2);
  EXPECT_THROW(normalize_axis(3, 3), ShapeError);
}

TEST(Tensor, OwnsAlignedStorageAndViewsShareIt) {
  Tensor t = Tensor::zeros(DType::kF32, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u);
  EXPECT_EQ(t.nbytes(), 60u);
  Tensor v = t.reshaped({15});
  v.data<float>()[7] = 2.f;
  EXPECT_EQ(t.data<float>()[7], 2.f);
  Tensor c = t.clone();
  c.data<float>()[7] = 3.f;
  EXPECT_EQ(t.data<float>()[7], 2.f);
  EXPECT_THROW(t.reshaped({4, 4}), ShapeError);
  EXPECT_THROW(Tensor::empty(DType::kF32, {-1}), ShapeError);
  EXPECT_EQ(describe(t), "f32(3, 5)");
}

TEST(Tensor, StorageBytesCountLiveAndPeakStorage) {
  reset_storage_peak();
  const StorageBytes before = storage_bytes();
  EXPECT_EQ(before.peak, before.live);
  {
    Tensor a = Tensor::empty(DType::kF32, {1000});  // 4000 bytes, 4032 with alignment
    Tensor b = Tensor::empty(DType::kU8, {1});      // 1 byte, 64 with alignment
    EXPECT_EQ(storage_bytes().live, before.live + 4032 + 64);
    Tensor view = a.reshaped({10, 100});            // shares a's storage: no bytes
    EXPECT_EQ(storage_bytes().live, before.live + 4032 + 64);
  }
  EXPECT_EQ(storage_bytes().live, before.live);
  EXPECT_EQ(storage_bytes().peak, before.live + 4032 + 64);
  reset_storage_peak();
  EXPECT_EQ(storage_bytes().peak, before.live);
}

TEST(Arena, GrowsAlignedAndReportsMoves) {
  Arena arena;
  EXPECT_TRUE(arena.reserve(100));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.base()) % kTensorAlignment, 0u);
  EXPECT_FALSE(arena.reserve(50));
  EXPECT_TRUE(arena.reserve(1 << 20));
  EXPECT_GE(arena.capacity(), size_t{1} << 20);
}

TEST(ThreadPool, CoversEveryIndexOnceAndRethrowsErrors) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(10007, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(1000, 1, [](int64_t b, int64_t) {
    if (b > 500) throw ShapeError("boom");
  }), ShapeError);
  // Nested loops run serially inside a worker instead of deadlocking or oversubscribing.
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(100, 1, [&](int64_t bb, int64_t ee) { total += ee - bb; });
  });
  EXPECT_EQ(total.load(), 800);
  EXPECT_GE(ThreadPool::default_num_threads(), 1);
}

// Back-to-back small loops with more workers than cores: workers are often descheduled on their way
// out of one job while the next starts. Every index of every job must run exactly once, and run()
// must return (a chunk of a new job taken by a straggler of the old one used to be lost).
TEST(ThreadPool, BackToBackLoopsRunEachChunkOnce) {
  ThreadPool pool(8);
  std::vector<std::atomic<int>> hits(16);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 15;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].exchange(0), 1) << "job " << job;
  }
}

// A budget of one runs every loop of the global pool on the calling thread; the default budget
// uses the whole pool again; other pools ignore the budget.
TEST(ThreadPool, TheGlobalPoolFollowsTheThreadBudget) {
  auto threads_used = [](ThreadPool& pool) {
    std::mutex m;
    std::set<std::thread::id> ids;
    for (int round = 0; round < 50; ++round)
      pool.parallel_for(64, 1, [&](int64_t, int64_t) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        std::lock_guard<std::mutex> lock(m);
        ids.insert(std::this_thread::get_id());
      });
    return ids.size();
  };
  set_thread_budget(1);
  EXPECT_EQ(thread_budget(), 1);
  EXPECT_EQ(threads_used(ThreadPool::global()), 1u);
  ThreadPool other(2);
  EXPECT_EQ(threads_used(other), 2u);
  set_thread_budget(0);
  EXPECT_EQ(thread_budget(), ThreadPool::global().num_threads());
  if (ThreadPool::global().num_threads() > 1) EXPECT_GT(threads_used(ThreadPool::global()), 1u);
}

}  // namespace
}  // namespace trainrt
