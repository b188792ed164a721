// FusedMatMul against a naive reference in double: every transpose combination, alpha, batch dims
// broadcast both ways, the folded Linear-layer case, the 16-bit floats, empty products, errors.
#include <gtest/gtest.h>

#include <map>

#include "trainrt/core/shape.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_of;

Tensor fused_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, float alpha) {
  NodeSpec spec{.op = "FusedMatMul",
                .attrs = {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)},
                          {"alpha", Attribute::of_float(alpha)}},
                .domain = std::string(kTrainrtDomain)};
  return run_node(spec, {a, b}, cpu_kernel_table())[0];
}

// Offset of the matrix at output batch index `index` (row-major over out_batch) in a tensor whose
// batch dims `batch` broadcast to out_batch, in matrices.
int64_t batch_offset(const std::vector<int64_t>& batch, const std::vector<int64_t>& out_batch, int64_t index) {
  int64_t offset = 0, stride = 1;
  for (size_t d = out_batch.size(); d-- > 0;) {
    const int64_t i = index % out_batch[d];
    index /= out_batch[d];
    const size_t back = out_batch.size() - 1 - d;
    if (back >= batch.size()) continue;
    const int64_t size = batch[batch.size() - 1 - back];
    offset += (size == 1 ? 0 : i) * stride;
    stride *= size;
  }
  return offset;
}

// alpha * op(A) @ op(B) in double, as a's dtype.
Tensor reference(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha) {
  const std::vector<int64_t> batch_a(a.dims().begin(), a.dims().end() - 2);
  const std::vector<int64_t> batch_b(b.dims().begin(), b.dims().end() - 2);
  const std::vector<int64_t> batch = broadcast_dims(batch_a, batch_b);
  const int64_t m = a.dim(ta ? -1 : -2), k = a.dim(ta ? -2 : -1), n = b.dim(tb ? -2 : -1);
  std::vector<int64_t> dims = batch;
  dims.push_back(m);
  dims.push_back(n);
  std::vector<double> out(static_cast<size_t>(numel_of(dims)));
  for (int64_t p = 0; p < numel_of(batch); ++p) {
    const int64_t oa = batch_offset(batch_a, batch, p) * m * k, ob = batch_offset(batch_b, batch, p) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += a.to_double(oa + (ta ? l * m + i : i * k + l)) * b.to_double(ob + (tb ? j * k + l : l * n + j));
        out[static_cast<size_t>((p * m + i) * n + j)] = alpha * s;
      }
  }
  return testing::from_doubles(a.dtype(), dims, out);
}

// dims with the last two swapped when `trans`: how op(X) of the given dims is stored.
std::vector<int64_t> stored(std::vector<int64_t> dims, bool trans) {
  if (trans) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return dims;
}

TEST(FusedMatMulKernels, MatchesNaiveReference) {
  // op(A) dims x op(B) dims.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> products = {
      {{3, 4}, {4, 5}},          {{2, 3, 4}, {2, 4, 5}},    {{2, 1, 3, 4}, {3, 4, 5}},
      {{4, 3, 5}, {5, 2}},       {{3, 5}, {2, 5, 4}},       {{1, 3, 4}, {4, 5}},
      {{2, 3, 2, 4}, {3, 4, 6}}, {{2, 1, 7, 33}, {1, 3, 33, 9}}};
  uint32_t seed = 1;
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
    for (const auto& [da, db] : products)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const float alpha = (ta + tb) % 2 ? 0.5f : 1.f;
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " " << to_string(da) << " x " << to_string(db)
                                            << " transA " << ta << " transB " << tb);
          const Tensor a = random_of(t, stored(da, ta), seed++, -1, 1);
          const Tensor b = random_of(t, stored(db, tb), seed++, -1, 1);
          const double tol = t == DType::kF64 ? 1e-12 : t == DType::kF32 ? 1e-5 : 2 * testing::dtype_rtol(t);
          expect_close(fused_matmul(a, b, ta, tb, alpha), reference(a, b, ta, tb, alpha), tol, tol);
        }
}

// A Linear layer's batched input against a shared weight: one product over all rows.
TEST(FusedMatMulKernels, FoldsABatchSharingB) {
  const Tensor dy = random_of(DType::kF32, {4, 64, 48}, 1, -1, 1);
  const Tensor w = random_of(DType::kF32, {96, 48}, 2, -1, 1);
  expect_close(fused_matmul(dy, w, false, true, 1.f), reference(dy, w, false, true, 1.0), 1e-5, 1e-5);
}

TEST(FusedMatMulKernels, EmptyProducts) {
  for (DType t : {DType::kF32, DType::kF64}) {
    // K = 0: zeros; M = 0: an empty result.
    expect_close(fused_matmul(Tensor::empty(t, {2, 3, 0}), Tensor::empty(t, {0, 4}), false, false, 1.f),
                 Tensor::zeros(t, {2, 3, 4}));
    EXPECT_EQ(fused_matmul(Tensor::empty(t, {3, 0}), Tensor::empty(t, {5, 3}), true, true, 1.f).dims(),
              (std::vector<int64_t>{0, 5}));
  }
}

TEST(FusedMatMulKernels, RejectsShapesThatDoNotMultiply) {
  const Tensor a = random_of(DType::kF32, {2, 3, 4}, 1);
  EXPECT_THROW(fused_matmul(a, random_of(DType::kF32, {3, 5}, 2), false, false, 1.f), ShapeError);  // K
  EXPECT_THROW(fused_matmul(a, random_of(DType::kF32, {3, 4, 5}, 3), false, false, 1.f), ShapeError);  // batch
  EXPECT_THROW(fused_matmul(random_of(DType::kF32, {4}, 4), random_of(DType::kF32, {4, 5}, 5), false, false, 1.f),
               ShapeError);  // rank 1
  EXPECT_THROW(fused_matmul(a, random_of(DType::kF64, {4, 5}, 6), false, false, 1.f), ShapeError);  // dtype
}

}  // namespace
}  // namespace trainrt
