// Tests of gemm_f32 and of the MatMul and Gemm schemas and kernels, against a naive double
// reference written independently of the kernels (numpy matmul / ONNX Gemm semantics).
#include <map>
#include <optional>
#include <thread>
#include <tuple>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/gemm.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;

// ---- helpers ----

// Writes doubles into a tensor of any dtype this file tests (integers rounded to nearest).
Tensor tensor_from_doubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& v) {
  Tensor t = Tensor::empty(dtype, std::move(dims));
  visit_dtype(dtype, [&]<typename T>() {
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, Half>)
        t.data<Half>()[i] = Half{f32_to_f16(static_cast<float>(v[i]))};
      else if constexpr (std::is_same_v<T, BFloat16>)
        t.data<BFloat16>()[i] = BFloat16{f32_to_bf16(static_cast<float>(v[i]))};
      else if constexpr (std::is_integral_v<T>)
        t.data<T>()[i] = static_cast<T>(std::llround(v[i]));
      else
        t.data<T>()[i] = static_cast<T>(v[i]);
    }
  });
  return t;
}

// Random values of a dtype: uniform in [-1, 1) for floats, integers in [-4, 4] for integers.
Tensor random_of(DType dtype, std::vector<int64_t> dims, uint32_t seed) {
  Tensor f = random_tensor(dims, seed);
  std::vector<double> v(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = is_integer(dtype) ? std::round(f.data<float>()[i] * 4) : f.data<float>()[i];
  return tensor_from_doubles(dtype, std::move(dims), v);
}

// numpy.matmul in double: 1-D operands promoted and the added dim dropped, batch dims broadcast.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch = broadcast_dims(a_batch, b_batch);
  int64_t count = numel_of(batch);
  std::vector<double> out(static_cast<size_t>(count * m * n));
  // Index of matrix p of the result inside an operand with batch dims `own` (right-aligned).
  auto operand_matrix = [&](int64_t p, const std::vector<int64_t>& own) {
    int64_t index = 0, stride = 1;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t coord = p % batch[d];
      p /= batch[d];
      size_t od = d + own.size();
      if (od < batch.size()) continue;
      int64_t size = own[od - batch.size()];
      index += (size == 1 ? 0 : coord) * stride;
      stride *= size;
    }
    return index;
  };
  for (int64_t p = 0; p < count; ++p) {
    int64_t pa = operand_matrix(p, a_batch), pb = operand_matrix(p, b_batch);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += a.to_double(pa * m * k + i * k + l) * b.to_double(pb * k * n + l * n + j);
        out[static_cast<size_t>((p * m + i) * n + j)] = s;
      }
  }
  std::vector<int64_t> dims = batch;
  if (!a_vec) dims.push_back(m);
  if (!b_vec) dims.push_back(n);
  return tensor_from_doubles(a.dtype(), dims, out);
}

// ONNX Gemm in double: alpha * A' B' + beta * C, C broadcast to (M, N).
Tensor reference_gemm(const Tensor& a, const Tensor& b, const Tensor* c, float alpha, float beta,
                      bool trans_a, bool trans_b) {
  int64_t m = a.dim(trans_a ? 1 : 0), k = a.dim(trans_a ? 0 : 1), n = b.dim(trans_b ? 0 : 1);
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l)
        s += a.to_double(trans_a ? l * m + i : i * k + l) *
             b.to_double(trans_b ? j * k + l : l * n + j);
      double cv = 0;
      if (c) {
        int64_t rows = c->rank() == 2 ? c->dim(0) : 1, cols = c->rank() >= 1 ? c->dim(-1) : 1;
        cv = c->to_double((rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j));
      }
      out[static_cast<size_t>(i * n + j)] = alpha * s + beta * cv;
    }
  return tensor_from_doubles(a.dtype(), {m, n}, out);
}

std::map<std::string, Attribute> gemm_attrs(float alpha, float beta, int trans_a, int trans_b) {
  return {{"alpha", Attribute::of_float(alpha)},
          {"beta", Attribute::of_float(beta)},
          {"transA", Attribute::of_int(trans_a)},
          {"transB", Attribute::of_int(trans_b)}};
}

// ---- gemm_f32 ----

// Reference C = alpha op(A) op(B) + beta C on raw strided buffers.
void reference_gemm_raw(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        std::vector<double>& c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l)
        s += double(ta ? a[l * lda + i] : a[i * lda + l]) *
             double(tb ? b[j * ldb + l] : b[l * ldb + j]);
      double& cij = c[static_cast<size_t>(i * ldc + j)];
      cij = alpha * s + (beta == 0.f ? 0.0 : beta * cij);
    }
}

TEST(GemmF32, AllTransposesOddSizesPaddedLeadingDims) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {7, 5, 3},
                             {33, 17, 129},
                             {64, 1, 300}}) {
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, {0.5f, 1.f}, {-2.f, 0.25f}}) {
          int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
          Tensor a = random_tensor({(ta ? k : m) * lda}, 1),
                 b = random_tensor({(tb ? n : k) * ldb}, 2);
          Tensor c = random_tensor({m * ldc}, 3);
          std::vector<double> expected(c.data<float>(), c.data<float>() + c.numel());
          reference_gemm_raw(ta, tb, m, n, k, alpha, a.data<float>(), lda, b.data<float>(), ldb,
                             beta, expected, ldc);
          gemm_f32(ta, tb, m, n, k, alpha, a.data<float>(), lda, b.data<float>(), ldb, beta,
                   c.data<float>(), ldc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              // Padding columns of C (j >= n) must be left untouched.
              double want = expected[static_cast<size_t>(i * ldc + j)];
              ASSERT_NEAR(c.data<float>()[i * ldc + j], want, 1e-4 * (1 + std::abs(want)))
                  << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                  << " alpha=" << alpha << " beta=" << beta << " at (" << i << ", " << j << ")";
            }
        }
      }
}

// Products big enough to be split across the ThreadPool: over column blocks (n >= 128), over row
// blocks (n small, m >= 128) and over the batch, with transposes, alpha, beta and padded lds.
TEST(GemmF32, LargeProductsSplitIntoPieces) {
  for (auto [batch, m, n, k] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 130, 301, 70},
                                {1, 517, 100, 64},
                                {6, 96, 80, 100}}) {
    for (auto [ta, tb] : {std::pair{false, false}, {true, true}}) {
      int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
      int64_t stride_a = (ta ? k : m) * lda, stride_b = (tb ? n : k) * ldb, stride_c = m * ldc;
      Tensor a = random_tensor({batch * stride_a}, 1), b = random_tensor({batch * stride_b}, 2);
      Tensor c = random_tensor({batch * stride_c}, 3);
      std::vector<double> expected(c.data<float>(), c.data<float>() + c.numel());
      for (int64_t p = 0; p < batch; ++p) {
        auto first = expected.begin() + p * stride_c;
        std::vector<double> part(first, first + stride_c);
        reference_gemm_raw(ta, tb, m, n, k, 0.5f, a.data<float>() + p * stride_a, lda,
                           b.data<float>() + p * stride_b, ldb, 2.f, part, ldc);
        std::copy(part.begin(), part.end(), first);
      }
      gemm_f32_batched(batch, ta, tb, m, n, k, 0.5f, a.data<float>(), lda, stride_a,
                       b.data<float>(), ldb, stride_b, 2.f, c.data<float>(), ldc, stride_c);
      for (int64_t i = 0; i < c.numel(); ++i)
        ASSERT_NEAR(c.data<float>()[i], expected[static_cast<size_t>(i)],
                    1e-4 * (1 + std::abs(expected[static_cast<size_t>(i)])))
            << "batch=" << batch << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
            << " at " << i;
    }
  }
}

// gemm_bf16_f32: bf16 operands, an f32 C written unrounded (and read, with beta), in each transpose,
// whole and split into pieces. Products of bf16 values are exact in f32, so the reference is the
// double sum and the tolerance f32's; a result rounded to bf16 (relative error up to 2^-9) fails it.
TEST(GemmBf16F32, WritesUnroundedF32InEveryTransposeAndSplit) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7, 5, 3}, {33, 17, 129}, {130, 301, 70}})
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, {0.5f, 1.f}}) {
          const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
          const Tensor a = testing::to_bf16(random_tensor({(ta ? k : m) * lda}, 1));
          const Tensor b = testing::to_bf16(random_tensor({(tb ? n : k) * ldb}, 2));
          std::vector<float> wa(static_cast<size_t>(a.numel())), wb(static_cast<size_t>(b.numel()));
          for (size_t i = 0; i < wa.size(); ++i) wa[i] = bf16_to_f32(a.data<BFloat16>()[i].bits);
          for (size_t i = 0; i < wb.size(); ++i) wb[i] = bf16_to_f32(b.data<BFloat16>()[i].bits);
          Tensor c = random_tensor({m * ldc}, 3);
          std::vector<double> expected(c.data<float>(), c.data<float>() + c.numel());
          reference_gemm_raw(ta, tb, m, n, k, alpha, wa.data(), lda, wb.data(), ldb, beta, expected, ldc);
          gemm_bf16_f32(ta, tb, m, n, k, alpha, a.data<BFloat16>(), lda, b.data<BFloat16>(), ldb, beta,
                        c.data<float>(), ldc);
          for (int64_t i = 0; i < m * ldc; ++i) {  // padding columns (j >= n) untouched
            const double want = expected[static_cast<size_t>(i)];
            ASSERT_NEAR(c.data<float>()[i], want, 1e-5 * (1 + std::abs(want)))
                << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k << " at " << i;
          }
        }
}

// gemm_bf16 (bf16 C) through the same pieces: row blocks with a transposed A packed dense, column
// blocks through a dense C buffer (beta reading C's block in), a padded B packed once; each element
// the double product rounded to bf16, within one bf16 rounding (sums in f32 may round to the
// neighbour), padding columns of C untouched.
TEST(GemmBf16, RowAndColumnPiecesWithPackedOperands) {
  for (auto [ta, tb, m, n, k] : {std::tuple<int, int, int64_t, int64_t, int64_t>{1, 0, 300, 130, 70},
                                 {0, 1, 130, 301, 70}, {0, 0, 260, 260, 33}, {1, 1, 5, 700, 19}})
    for (float beta : {0.f, 1.f}) {
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      const Tensor a = testing::to_bf16(random_tensor({(ta ? k : m) * lda}, 1));
      const Tensor b = testing::to_bf16(random_tensor({(tb ? n : k) * ldb}, 2));
      Tensor c = testing::to_bf16(random_tensor({m * ldc}, 3));
      std::vector<double> expected(static_cast<size_t>(c.numel()));
      for (int64_t i = 0; i < c.numel(); ++i) expected[static_cast<size_t>(i)] = c.to_double(i);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l)
            sum += a.to_double(ta ? l * lda + i : i * lda + l) * b.to_double(tb ? j * ldb + l : l * ldb + j);
          double& cij = expected[static_cast<size_t>(i * ldc + j)];
          cij = sum + (beta == 0.f ? 0.0 : beta * cij);
        }
      gemm_bf16(ta, tb, m, n, k, 1.f, a.data<BFloat16>(), lda, b.data<BFloat16>(), ldb, beta, c.data<BFloat16>(), ldc);
      for (int64_t i = 0; i < c.numel(); ++i) {
        const double want = expected[static_cast<size_t>(i)];
        ASSERT_NEAR(c.to_double(i), want, 8e-3 * std::abs(want) + 1e-6)
            << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " beta=" << beta << " at " << i;
      }
    }
}

TEST(GemmF32, EmptyKScalesC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  gemm_f32(false, false, 2, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.5f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  c.assign(6, std::nanf(""));
  gemm_f32(false, false, 2, 3, 0, 1.f, nullptr, 1, nullptr, 3, 0.f, c.data(), 3);
  EXPECT_EQ(c, std::vector<float>(6, 0.f));  // beta == 0 overwrites, NaNs included
}

TEST(GemmF32, BatchedStridedWithBroadcastOperand) {
  const int64_t batch = 5, m = 9, n = 11, k = 13;
  for (bool broadcast_b : {false, true}) {
    Tensor a = random_tensor({batch, k, m}, 4);  // stored transposed
    Tensor b = random_tensor({broadcast_b ? 1 : batch, k, n}, 5);
    Tensor c = Tensor::zeros(DType::kF32, {batch, m, n});
    gemm_f32_batched(batch, true, false, m, n, k, 1.f, a.data<float>(), m, k * m, b.data<float>(),
                     n, broadcast_b ? 0 : k * n, 0.f, c.data<float>(), n, m * n);
    for (int64_t p = 0; p < batch; ++p) {
      std::vector<double> expected(static_cast<size_t>(m * n));
      reference_gemm_raw(true, false, m, n, k, 1.f, a.data<float>() + p * k * m, m,
                         b.data<float>() + (broadcast_b ? 0 : p * k * n), n, 0.f, expected, n);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_NEAR(c.data<float>()[p * m * n + i], expected[static_cast<size_t>(i)], 1e-4);
    }
  }
}

TEST(GemmF32, ConcurrentCallsShareCachedPrimitives) {
  const int64_t m = 64, n = 48, k = 80;
  Tensor a = random_tensor({m, k}, 6), b = random_tensor({k, n}, 7);
  std::vector<double> expected(static_cast<size_t>(m * n));
  reference_gemm_raw(false, false, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), n, 0.f,
                     expected, n);
  std::vector<std::vector<float>> results(4, std::vector<float>(static_cast<size_t>(m * n)));
  std::vector<std::thread> threads;
  for (auto& r : results)
    threads.emplace_back([&, out = r.data()] {
      for (int rep = 0; rep < 20; ++rep)
        gemm_f32(false, false, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), n, 0.f, out, n);
    });
  for (auto& t : threads) t.join();
  for (const auto& r : results)
    for (size_t i = 0; i < r.size(); ++i) ASSERT_NEAR(r[i], expected[i], 1e-4);
}

// ---- MatMul ----

void check_matmul(std::vector<int64_t> a_dims, std::vector<int64_t> b_dims,
                  DType dtype = DType::kF32, double tol = 1e-4) {
  Tensor a = random_of(dtype, a_dims, 10), b = random_of(dtype, b_dims, 11);
  SCOPED_TRACE(describe(a) + " x " + describe(b));
  expect_close(run_node("MatMul", {a, b})[0], reference_matmul(a, b), tol, tol);
}

TEST(MatMul, TwoDimOddShapes) {
  check_matmul({3, 4}, {4, 3});
  check_matmul({1, 1}, {1, 1});
  check_matmul({127, 255}, {255, 129});
  check_matmul({5, 300}, {300, 1});
}

TEST(MatMul, BatchedAndBroadcastBatchDims) {
  check_matmul({2, 3, 4}, {2, 4, 3});           // ONNX test_matmul_3d
  check_matmul({1, 2, 3, 4}, {1, 2, 4, 3});     // test_matmul_4d
  check_matmul({3, 1, 3, 4}, {1, 2, 4, 2});     // test_matmul_bcast
  check_matmul({4, 6, 7, 5}, {5, 3});           // B shared: batch folded into M
  check_matmul({7, 5}, {4, 2, 5, 3});           // A shared by every matrix of B
  check_matmul({2, 1, 3, 7, 5}, {4, 1, 5, 6});  // broadcast on both sides
  check_matmul({32, 17, 8}, {32, 8, 17});
}

TEST(MatMul, OneDimOperands) {
  check_matmul({4}, {2, 4, 1});     // test_matmul_1d_3d -> (2, 1)
  check_matmul({1, 2, 4, 3}, {3});  // test_matmul_4d_1d -> (1, 2, 4)
  check_matmul({3}, {3});           // test_matmul_1d_1d -> ()
  check_matmul({6}, {6, 5});
  check_matmul({5, 6}, {6});
  EXPECT_EQ(run_node("MatMul", {random_tensor({3}, 1), random_tensor({3}, 2)})[0].rank(), 0);
}

TEST(MatMul, EmptyDims) {
  Tensor y = run_node("MatMul", {random_tensor({2, 3, 0}, 1), random_tensor({0, 4}, 2)})[0];
  expect_close(y, Tensor::zeros(DType::kF32, {2, 3, 4}));  // empty K: a sum of nothing
  EXPECT_EQ(run_node("MatMul", {random_tensor({0, 3}, 1), random_tensor({3, 4}, 2)})[0].dims(),
            (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(
      run_node("MatMul", {random_tensor({2, 0, 3, 4}, 1), random_tensor({4, 5}, 2)})[0].dims(),
      (std::vector<int64_t>{2, 0, 3, 5}));
}

TEST(MatMul, OtherDtypesUseTheLoop) {
  check_matmul({3, 1, 5, 7}, {2, 7, 4}, DType::kF64, 1e-12);
  check_matmul({4, 7}, {7}, DType::kI32, 0);
  check_matmul({2, 3, 9}, {9, 2}, DType::kI64, 0);
  check_matmul({2, 5, 16}, {2, 16, 3}, DType::kF16, 2e-2);
}

// bf16 runs on oneDNN: against the double reference rounded to bf16, within one bf16 step (2^-7
// relative) of the result, for shapes that take each way of splitting a product over threads.
TEST(MatMul, Bf16OnOneDnn) {
  check_matmul({5, 16}, {16, 3}, DType::kBF16, 1e-2);
  check_matmul({127, 255}, {255, 129}, DType::kBF16, 1e-2);     // column blocks
  check_matmul({300, 40}, {40, 7}, DType::kBF16, 1e-2);         // row blocks
  check_matmul({2, 3, 33, 70}, {70, 150}, DType::kBF16, 1e-2);  // B shared: batch folded into M
  check_matmul({4, 1, 9, 16}, {3, 16, 5}, DType::kBF16, 1e-2);  // broadcast batch
  check_matmul({16}, {2, 16, 3}, DType::kBF16, 1e-2);           // 1-D operand
}

// 512 products of 1 * 1: a bf16 running sum stops at 256 (256 + 1 rounds back to 256 with 8
// significant bits), an f32 one reaches 512, which bf16 holds exactly.
TEST(MatMul, Bf16SumsInF32) {
  Tensor ones_a = tensor_from_doubles(DType::kBF16, {2, 512}, std::vector<double>(1024, 1.0));
  Tensor ones_b = tensor_from_doubles(DType::kBF16, {512, 3}, std::vector<double>(1536, 1.0));
  Tensor y = run_node("MatMul", {ones_a, ones_b})[0];
  ASSERT_EQ(y.dtype(), DType::kBF16);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.to_double(i), 512.0) << "element " << i;
}

TEST(MatMul, IntegerProductsWrapLikeNumpy) {
  Tensor a = make_tensor<int32_t>({1, 2}, {1 << 30, 1 << 30});
  Tensor b = make_tensor<int32_t>({2, 1}, {4, 1});
  // 2^32 + 2^30 wraps to 2^30 in int32.
  EXPECT_EQ(run_node("MatMul", {a, b})[0].data<int32_t>()[0], 1 << 30);
}

TEST(MatMul, BadShapesAndDtypesThrowNamingTheNode) {
  try {
    run_node("MatMul", {random_tensor({2, 3}, 1), random_tensor({4, 5}, 2)});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(MatMul)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_node("MatMul", {random_tensor({2, 2, 3}, 1), random_tensor({3, 3, 5}, 2)}),
               ShapeError);
  EXPECT_THROW(run_node("MatMul", {random_tensor({2, 3}, 1), random_of(DType::kF64, {3, 2}, 2)}),
               ShapeError);
  EXPECT_THROW(run_node("MatMul", {Tensor::scalar<float>(1.f), random_tensor({3}, 2)}), ShapeError);
  EXPECT_THROW(
      run_node("MatMul", {make_tensor<bool>({1, 1}, {true}), make_tensor<bool>({1, 1}, {true})}),
      ShapeError);
}

// ---- Gemm ----

void check_gemm(std::vector<int64_t> a_dims, std::vector<int64_t> b_dims,
                std::optional<std::vector<int64_t>> c_dims, float alpha, float beta, int trans_a,
                int trans_b, DType dtype = DType::kF32, double tol = 1e-4) {
  Tensor a = random_of(dtype, a_dims, 20), b = random_of(dtype, b_dims, 21);
  Tensor c = c_dims ? random_of(dtype, *c_dims, 22) : Tensor();
  SCOPED_TRACE(describe(a) + " x " + describe(b) + (c_dims ? " + " + describe(c) : std::string()));
  Tensor y = run_node("Gemm", c_dims ? std::vector<Tensor>{a, b, c} : std::vector<Tensor>{a, b},
                      gemm_attrs(alpha, beta, trans_a, trans_b))[0];
  expect_close(y, reference_gemm(a, b, c_dims ? &c : nullptr, alpha, beta, trans_a, trans_b), tol,
               tol);
}

TEST(Gemm, OnnxBackendCases) {
  check_gemm({3, 5}, {5, 4}, std::vector<int64_t>{1, 4}, 1.f, 1.f, 0,
             0);                                                        // default_zero_bias (shape)
  check_gemm({2, 10}, {10, 3}, std::nullopt, 1.f, 1.f, 0, 0);           // default_no_bias
  check_gemm({2, 3}, {3, 4}, std::vector<int64_t>{}, 1.f, 1.f, 0, 0);   // default_scalar_bias
  check_gemm({3, 7}, {7, 3}, std::vector<int64_t>{1}, 1.f, 1.f, 0, 0);  // single_elem_vector_bias
  check_gemm({2, 7}, {7, 4}, std::vector<int64_t>{1, 4}, 1.f, 1.f, 0, 0);   // default_vector_bias
  check_gemm({3, 6}, {6, 4}, std::vector<int64_t>{3, 4}, 1.f, 1.f, 0, 0);   // default_matrix_bias
  check_gemm({6, 3}, {6, 4}, std::vector<int64_t>{1, 4}, 1.f, 1.f, 1, 0);   // transposeA
  check_gemm({3, 6}, {4, 6}, std::vector<int64_t>{1, 4}, 1.f, 1.f, 0, 1);   // transposeB
  check_gemm({3, 5}, {5, 4}, std::vector<int64_t>{1, 4}, 0.5f, 1.f, 0, 0);  // alpha
  check_gemm({2, 7}, {7, 4}, std::vector<int64_t>{1, 4}, 1.f, 0.5f, 0, 0);  // beta
  check_gemm({4, 3}, {5, 4}, std::vector<int64_t>{1, 5}, 0.25f, 0.35f, 1, 1);  // all_attributes
}

TEST(Gemm, MoreBroadcastsOddSizesAndDtypes) {
  check_gemm({37, 129}, {65, 129}, std::vector<int64_t>{37, 1}, 1.f, -1.f, 0, 1);
  check_gemm({129, 37}, {129, 65}, std::vector<int64_t>{65}, 2.f, 1.f, 1, 0);
  check_gemm({1, 1}, {1, 1}, std::vector<int64_t>{1, 1}, 1.f, 1.f, 1, 1);
  check_gemm({4, 3}, {5, 4}, std::vector<int64_t>{3, 5}, 0.25f, 0.35f, 1, 1, DType::kF64, 1e-12);
  check_gemm({4, 3}, {3, 5}, std::vector<int64_t>{1, 5}, 1.f, 1.f, 0, 0, DType::kI32, 0);
  check_gemm({3, 4}, {5, 3}, std::vector<int64_t>{4, 5}, 2.f, 3.f, 1, 1, DType::kI64, 0);
  check_gemm({16, 8}, {4, 16}, std::nullopt, 0.5f, 1.f, 1, 1, DType::kF16, 2e-2);
}

// bf16 Gemm on oneDNN: C broadcast and added (beta) to the f32 sums, alpha, both transposes.
TEST(Gemm, Bf16OnOneDnn) {
  check_gemm({8, 16}, {16, 4}, std::vector<int64_t>{4}, 1.f, 1.f, 0, 0, DType::kBF16, 1e-2);
  check_gemm({37, 129}, {65, 129}, std::vector<int64_t>{37, 1}, 1.f, -1.f, 0, 1, DType::kBF16, 1e-2);
  check_gemm({129, 37}, {129, 200}, std::vector<int64_t>{200}, 0.5f, 0.25f, 1, 0, DType::kBF16, 1e-2);
  check_gemm({20, 3}, {50, 20}, std::nullopt, 2.f, 1.f, 1, 1, DType::kBF16, 1e-2);
  check_gemm({2, 0}, {0, 3}, std::vector<int64_t>{2, 3}, 1.f, 0.5f, 0, 0, DType::kBF16, 1e-2);  // empty K
}

TEST(Gemm, EmptyKGivesBetaTimesC) {
  Tensor c = random_tensor({2, 3}, 1);
  Tensor y =
      run_node("Gemm", {Tensor::empty(DType::kF32, {2, 0}), Tensor::empty(DType::kF32, {0, 3}), c},
               gemm_attrs(1.f, 0.5f, 0, 0))[0];
  expect_close(y, reference_gemm(Tensor::empty(DType::kF32, {2, 0}),
                                 Tensor::empty(DType::kF32, {0, 3}), &c, 1.f, 0.5f, false, false));
}

TEST(Gemm, ZeroBetaIgnoresC) {
  Tensor c = make_tensor<float>({1}, {std::nanf("")});
  Tensor y = run_node("Gemm", {random_tensor({2, 3}, 1), random_tensor({3, 2}, 2), c},
                      gemm_attrs(1.f, 0.f, 0, 0))[0];
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_FALSE(std::isnan(y.data<float>()[i]));
}

TEST(Gemm, BadShapesThrow) {
  EXPECT_THROW(run_node("Gemm", {random_tensor({2, 3}, 1), random_tensor({4, 5}, 2)}), ShapeError);
  EXPECT_THROW(run_node("Gemm", {random_tensor({2, 3}, 1), random_tensor({3, 5}, 2),
                                 random_tensor({3, 5}, 3)}),
               ShapeError);
  EXPECT_THROW(run_node("Gemm", {random_tensor({2, 3}, 1), random_tensor({3, 5}, 2),
                                 random_tensor({1, 1, 5}, 3)}),
               ShapeError);
  EXPECT_THROW(run_node("Gemm", {random_tensor({2, 3, 1}, 1), random_tensor({3, 5}, 2)}),
               ShapeError);
}

// ---- shape inference with symbolic dims ----

TEST(MatMulSchema, SymbolicBatchAndSequence) {
  Graph g;
  Value* x =
      g.add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), Dim::symbolic("seq"), 64}});
  Value* w = g.add_input("w", DType::kF32, Shape{{64, 128}});
  Value* v = g.add_input("v", DType::kF32, Shape{{128}});
  Node* mm = g.add_node("MatMul", {x, w}, {"y"});
  Node* mv = g.add_node("MatMul", {mm->output(0), v}, {"z"});
  infer_graph_shapes(g);
  EXPECT_EQ(to_string(mm->output(0)->shape), "(batch, seq, 128)");
  EXPECT_EQ(mm->output(0)->dtype, DType::kF32);
  EXPECT_EQ(to_string(mv->output(0)->shape), "(batch, seq)");
}

TEST(MatMulSchema, SymbolicBroadcastUnknownRankAndMismatch) {
  Graph g;
  Value* q =
      g.add_input("q", DType::kF32, Shape{{Dim::symbolic("batch"), 12, Dim::symbolic("seq"), 64}});
  Value* k = g.add_input("k", DType::kF32, Shape{{1, 12, 64, Dim::symbolic("seq")}});
  Value* u = g.add_input("u", DType::kF32, Shape::unknown_rank());
  Node* scores = g.add_node("MatMul", {q, k}, {"s"});
  Node* any = g.add_node("MatMul", {q, u}, {"t"});
  infer_graph_shapes(g);
  EXPECT_EQ(to_string(scores->output(0)->shape), "(batch, 12, seq, seq)");
  EXPECT_FALSE(any->output(0)->shape.rank_known);

  Graph bad;
  Value* a = bad.add_input("a", DType::kF32, Shape{{Dim::symbolic("batch"), 64}});
  Value* b = bad.add_input("b", DType::kF32, Shape{{32, 10}});
  bad.add_node("MatMul", {a, b}, {"c"}, kOnnxDomain, "logits");
  try {
    infer_graph_shapes(bad);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'logits'"), std::string::npos) << e.what();
  }
}

TEST(GemmSchema, SymbolicRowsAndBiasRefinesDims) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), 784}});
  Value* w = g.add_input("w", DType::kF32, Shape{{2048, 784}});
  Value* bias = g.add_input("bias", DType::kF32, Shape{{2048}});
  Node* fc = g.add_node("Gemm", {x, w, bias}, {"y"});
  fc->set_attr("transB", Attribute::of_int(1));
  Value* h = g.add_input("h", DType::kF32, Shape{{Dim::symbolic("n"), Dim::symbolic("k")}});
  Value* c = g.add_input("c", DType::kF32, Shape{{8, 1}});
  Node* refined = g.add_node("Gemm", {h, h, c}, {"z"});
  infer_graph_shapes(g);
  EXPECT_EQ(to_string(fc->output(0)->shape), "(batch, 2048)");
  EXPECT_EQ(to_string(refined->output(0)->shape), "(8, k)");
}

}  // namespace
}  // namespace trainrt
