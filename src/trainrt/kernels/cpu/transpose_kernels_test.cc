#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/strided_copy.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"

namespace trainrt {
namespace {

using testing::expect_same;
using testing::for_each_index;
using testing::iota;
using testing::pick;

// numpy.transpose(x, perm) by index arithmetic.
Tensor reference_transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out_dims;
  for (int64_t p : perm) out_dims.push_back(x.dim(p));
  std::vector<int64_t> from;
  for_each_index(out_dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in(perm.size());
    for (size_t j = 0; j < perm.size(); ++j) in[static_cast<size_t>(perm[j])] = o[j];
    from.push_back(testing::flat_index(x.dims(), in));
  });
  return pick(x, out_dims, from);
}

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  return run_node("Transpose", {x}, {{"perm", Attribute::of_ints(perm)}})[0];
}

TEST(TransposeKernel, AllPermutationsOfRank3And4InEveryDType) {
  for (DType t : testing::kAllDTypes) {
    for (const std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 4}, {2, 3, 4, 5}}) {
      Tensor x = iota(t, dims);
      std::vector<int64_t> perm(dims.size());
      std::iota(perm.begin(), perm.end(), 0);
      do {
        expect_same(transpose(x, perm), reference_transpose(x, perm));
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  }
}

TEST(TransposeKernel, DefaultPermReversesAxes) {
  Tensor x = iota(DType::kF32, {2, 3, 4});
  expect_same(run_node("Transpose", {x})[0], reference_transpose(x, {2, 1, 0}));
}

TEST(TransposeKernel, LargeMatricesTakeTheTiledPathInEveryElementSize) {
  for (DType t : {DType::kU8, DType::kF16, DType::kF32, DType::kF64}) {
    Tensor x = iota(t, {131, 67});  // not multiples of the tile
    expect_same(transpose(x, {1, 0}), reference_transpose(x, {1, 0}));
    Tensor b = iota(t, {3, 70, 145});
    expect_same(transpose(b, {0, 2, 1}), reference_transpose(b, {0, 2, 1}));
  }
  Tensor nchw = iota(DType::kF32, {2, 16, 9, 7});  // NCHW -> NHWC merges to a batched 2-D transpose
  expect_same(transpose(nchw, {0, 2, 3, 1}), reference_transpose(nchw, {0, 2, 3, 1}));
}

TEST(TransposeKernel, AttentionHeadsPermutation) {
  Tensor x = iota(DType::kF32, {2, 33, 4, 64});  // (batch, seq, heads, head_dim)
  expect_same(transpose(x, {0, 2, 1, 3}), reference_transpose(x, {0, 2, 1, 3}));
  Tensor y = iota(DType::kBF16, {2, 4, 33, 64});
  expect_same(transpose(y, {0, 2, 1, 3}), reference_transpose(y, {0, 2, 1, 3}));
  expect_same(transpose(y, {0, 1, 3, 2}), reference_transpose(y, {0, 1, 3, 2}));
}

TEST(TransposeKernel, EmptyAndSizeOneDims) {
  Tensor e = iota(DType::kF32, {0, 3});
  EXPECT_EQ(transpose(e, {1, 0}).dims(), (std::vector<int64_t>{3, 0}));
  Tensor x = iota(DType::kI64, {1, 5, 1, 3});
  expect_same(transpose(x, {3, 2, 0, 1}), reference_transpose(x, {3, 2, 0, 1}));
  Tensor s = Tensor::scalar<float>(3.f);
  expect_same(run_node("Transpose", {s})[0], s);
}

TEST(TransposeKernel, BadPermIsAShapeErrorNamingTheNode) {
  Tensor x = iota(DType::kF32, {2, 3});
  try {
    transpose(x, {0, 0});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(Transpose)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(transpose(x, {0, 1, 2}), ShapeError);
}

// numpy broadcast of x to dims, by index arithmetic.
Tensor reference_expand(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> from;
  const size_t lead = dims.size() - static_cast<size_t>(x.rank());
  for_each_index(dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in;
    for (size_t j = lead; j < dims.size(); ++j)
      in.push_back(x.dim(static_cast<int64_t>(j - lead)) == 1 ? 0 : o[j]);
    from.push_back(testing::flat_index(x.dims(), in));
  });
  return pick(x, dims, from);
}

TEST(ExpandKernel, OnnxCasesAndBroadcastPatterns) {
  Tensor x = iota(DType::kF32, {3, 1});
  // test_expand_dim_changed: (3, 1) by (2, 1, 6) -> (2, 3, 6)
  expect_same(run_node("Expand", {x, Tensor::from_i64({2, 1, 6})})[0], reference_expand(x, {2, 3, 6}));
  // test_expand_dim_unchanged: (3, 1) by (3, 4)
  expect_same(run_node("Expand", {x, Tensor::from_i64({3, 4})})[0], reference_expand(x, {3, 4}));
  for (DType t : testing::kAllDTypes) {
    Tensor y = iota(t, {1, 4, 1, 3});
    expect_same(run_node("Expand", {y, Tensor::from_i64({2, 1, 5, 1})})[0],
                reference_expand(y, {2, 4, 5, 3}));
  }
  // A shape of smaller rank and 1s keeps the input dims.
  Tensor z = iota(DType::kI32, {2, 3});
  expect_same(run_node("Expand", {z, Tensor::from_i64({1})})[0], z);
  EXPECT_EQ(run_node("Expand", {z, Tensor::from_i64({0, 1, 3})})[0].dims(), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_THROW(run_node("Expand", {z, Tensor::from_i64({4, 3})}), ShapeError);
}

Tensor reference_tile(const Tensor& x, const std::vector<int64_t>& repeats) {
  std::vector<int64_t> dims;
  for (size_t j = 0; j < repeats.size(); ++j) dims.push_back(x.dims()[j] * repeats[j]);
  std::vector<int64_t> from;
  for_each_index(dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in;
    for (size_t j = 0; j < o.size(); ++j) in.push_back(o[j] % x.dims()[j]);
    from.push_back(testing::flat_index(x.dims(), in));
  });
  return pick(x, dims, from);
}

TEST(TileKernel, OnnxCasesAndDTypes) {
  // test_tile_precomputed
  Tensor x = testing::make_tensor<float>({2, 2}, {0, 1, 2, 3});
  Tensor want = testing::make_tensor<float>({4, 4}, {0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3});
  expect_same(run_node("Tile", {x, Tensor::from_i64({2, 2})})[0], want);
  // test_tile: (2, 3, 4, 5) with repeats in [1, 10)
  Tensor big = iota(DType::kF32, {2, 3, 4, 5});
  expect_same(run_node("Tile", {big, Tensor::from_i64({3, 1, 7, 2})})[0], reference_tile(big, {3, 1, 7, 2}));
  for (DType t : testing::kAllDTypes) {
    Tensor y = iota(t, {3, 1, 2});
    expect_same(run_node("Tile", {y, Tensor::from_i64({2, 4, 3})})[0], reference_tile(y, {2, 4, 3}));
  }
  EXPECT_EQ(run_node("Tile", {x, Tensor::from_i64({0, 2})})[0].dims(), (std::vector<int64_t>{0, 4}));
  EXPECT_THROW(run_node("Tile", {x, Tensor::from_i64({2})}), ShapeError);
}

TEST(StridedCopy, CoalescesContiguousAndBroadcastDims) {
  std::vector<int64_t> dims{2, 1, 3, 4}, strides{12, 99, 4, 1};
  coalesce_dims(dims, strides);
  EXPECT_EQ(dims, (std::vector<int64_t>{24}));
  EXPECT_EQ(strides, (std::vector<int64_t>{1}));
  dims = {5, 2, 3};
  strides = {0, 0, 1};
  coalesce_dims(dims, strides);
  EXPECT_EQ(dims, (std::vector<int64_t>{10, 3}));
  EXPECT_EQ(strides, (std::vector<int64_t>{0, 1}));
}

TEST(StridedCopy, ResultDoesNotDependOnThreadCount) {
  Tensor x = iota(DType::kF32, {64, 48, 40});
  Tensor a = Tensor::empty(DType::kF32, {40, 48, 64}), b = Tensor::empty(DType::kF32, {40, 48, 64});
  ThreadPool one(1), three(3);
  strided_copy(x.raw(), a.raw(), {40, 48, 64}, {1, 40, 48 * 40}, 4, one);
  strided_copy(x.raw(), b.raw(), {40, 48, 64}, {1, 40, 48 * 40}, 4, three);
  expect_same(a, reference_transpose(x, {2, 1, 0}));
  expect_same(b, a);
}

}  // namespace
}  // namespace trainrt
