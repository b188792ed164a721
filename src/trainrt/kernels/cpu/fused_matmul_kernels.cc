// FusedMatMul CPU kernels (fused_matmul_kernels.h).
//
// A (..., M, K) or stored (..., K, M) with transA; B (..., K, N) or stored (..., N, K) with
// transB; Y (batch..., M, N). The batch dims are planned as MatMul's kernel plans them: size-1
// dims dropped, broadcast dims given stride 0, contiguous runs merged, and the innermost one left
// to gemm_f32_batched. A B shared by a contiguous, untransposed A (dA = dY @ W^T of a Linear
// layer's batched input) is one product with the batch folded into M. With a bias (N), f32 Y is
// first filled with the bias rows and the products add onto it (beta = 1, oneDNN's sum post-op:
// no separate pass reading and writing Y again); the row loop adds it to each finished row. With
// output_dtype = 1, bf16 A and B give an f32 Y (gemm_bf16_f32_batched; passes/product_cast_fusion.h).
#include <algorithm>
#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/elementwise.h"
#include "trainrt/kernels/cpu/fused_matmul_kernels.h"
#include "trainrt/kernels/cpu/batched_product.h"
#include "trainrt/kernels/cpu/gemm.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

struct Attrs {
  std::string where;
  bool trans_a, trans_b;
  float alpha;
};

struct ProductPlan {
  int64_t m = 1, n = 1, k = 1;
  int64_t lda = 1, ldb = 1;     // row strides of A and B as stored (>= 1, as BLAS wants)
  std::vector<BatchDim> batch;  // batched_product.h, outermost first
};

// The concrete-shape counterpart of the schema's inference, with the same checks (a dim that was
// symbolic when the plan was built is checked here).
ProductPlan plan_product(const Attrs& at, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                         const std::vector<int64_t>& out) {
  if (a.size() < 2 || b.size() < 2)
    throw ShapeError(fmt(at.where, ": FusedMatMul needs rank >= 2, got shapes ", to_string(a), " and ", to_string(b)));
  const size_t ra = a.size(), rb = b.size();
  ProductPlan p;
  p.m = a[at.trans_a ? ra - 1 : ra - 2];
  p.k = a[at.trans_a ? ra - 2 : ra - 1];
  p.n = b[at.trans_b ? rb - 2 : rb - 1];
  const int64_t k_b = b[at.trans_b ? rb - 1 : rb - 2];
  if (p.k != k_b)
    throw ShapeError(fmt(at.where, ": inner dims differ: input 0 ", to_string(a), " has K = ", p.k, ", input 1 ",
                         to_string(b), " has K = ", k_b));
  p.lda = std::max<int64_t>(1, a[ra - 1]);
  p.ldb = std::max<int64_t>(1, b[rb - 1]);
  std::vector<int64_t> expected;
  p.batch = plan_batch(at.where, a, ra - 2, b, rb - 2, p.m, p.n, p.k, expected);
  expected.push_back(p.m);
  expected.push_back(p.n);
  TRAINRT_CHECK(out == expected, at.where, ": output allocated as ", to_string(out), ", expected ",
                to_string(expected));
  return p;
}

// y (rows, n) = the bias row repeated.
template <typename T>
void fill_rows(const T* bias, int64_t rows, int64_t n, T* y, ThreadPool& pool) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, n));
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) std::copy(bias, bias + n, y + r * n);
  });
}

// T = float or BFloat16, C = T or (output_dtype f32) float (gemm_batched). beta = 1 adds the products
// onto what y holds (the bias rows), 0 overwrites it.
template <typename T, typename C = T>
void run_onednn(const Attrs& at, const ProductPlan& p, const T* a, const T* b, float beta, C* y) {
  const int64_t ldc = std::max<int64_t>(1, p.n);
  if (p.batch.size() == 1 && p.batch[0].stride_b == 0 && !at.trans_a && p.batch[0].stride_a == p.m * p.k) {
    gemm_batched<T, C>(1, false, at.trans_b, p.batch[0].size * p.m, p.n, p.k, at.alpha, a, p.lda, 0, b, p.ldb, 0, beta,
                    y, ldc, 0);
    return;
  }
  for_each_batch_run(p.batch, [&](int64_t oa, int64_t ob, int64_t oc, const BatchDim& inner) {
    gemm_batched<T, C>(inner.size, at.trans_a, at.trans_b, p.m, p.n, p.k, at.alpha, a + oa, p.lda, inner.stride_a,
                    b + ob, p.ldb, inner.stride_b, beta, y + oc, ldc, inner.stride_c);
  });
}

// The row loop: every (matrix, row) pair is a task; sums in arith_t<T> (f64 for f64, f32 for f16).
template <typename T>
void run_loop(const Attrs& at, const ProductPlan& p, const T* a, const T* b, const T* bias, T* y, ThreadPool& pool) {
  using Acc = arith_t<T>;
  std::vector<std::array<int64_t, 3>> matrices;
  for_each_batch_run(p.batch, [&](int64_t oa, int64_t ob, int64_t oc, const BatchDim& inner) {
    for (int64_t i = 0; i < inner.size; ++i)
      matrices.push_back({oa + i * inner.stride_a, ob + i * inner.stride_b, oc + i * inner.stride_c});
  });
  const int64_t rows = static_cast<int64_t>(matrices.size()) * p.m;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, p.n * p.k));
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(static_cast<size_t>(p.n));
    for (int64_t r = begin; r < end; ++r) {
      const auto& [oa, ob, oc] = matrices[static_cast<size_t>(r / p.m)];
      const int64_t i = r % p.m;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t l = 0; l < p.k; ++l) {
        const Acc x = to_arith(a[oa + (at.trans_a ? l * p.lda + i : i * p.lda + l)]);
        for (int64_t j = 0; j < p.n; ++j)
          acc[static_cast<size_t>(j)] += x * to_arith(b[ob + (at.trans_b ? j * p.ldb + l : l * p.ldb + j)]);
      }
      for (int64_t j = 0; j < p.n; ++j)
        y[oc + i * p.n + j] = from_arith<T>(static_cast<Acc>(at.alpha) * acc[static_cast<size_t>(j)] +
                                            (bias ? to_arith(bias[j]) : Acc(0)));
    }
  });
}

template <typename T>
KernelFn make_fused_matmul(const Node& node) {
  Attrs at{node.describe(), node.attr_int("transA", 0) != 0, node.attr_int("transB", 0) != 0,
           node.attr_float("alpha", 1.f)};
  for (int i = 0; i < 2; ++i)
    if (!node.input(i) || node.input(i)->dtype != dtype_of<T>())
      throw InvalidModel(fmt(at.where, ": input ", i, " must be present with dtype ", dtype_name(dtype_of<T>())));
  if (node.input(2) && node.input(2)->dtype != dtype_of<T>())
    throw InvalidModel(fmt(at.where, ": input 2 (bias) must have dtype ", dtype_name(dtype_of<T>())));
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (node.attr_int("output_dtype", 0) == 1)
      return [at, last = LastPlan<ProductPlan>()](KernelContext& ctx) mutable {
        const Tensor& a = ctx.in(0);
        const Tensor& b = ctx.in(1);
        Tensor& y = ctx.out(0);
        const ProductPlan& p =
            last.get(a.dims(), b.dims(), y.dims(), [&] { return plan_product(at, a.dims(), b.dims(), y.dims()); });
        if (y.numel() == 0) return;
        if (p.k == 0) std::fill(y.data<float>(), y.data<float>() + y.numel(), 0.f);
        else run_onednn<BFloat16, float>(at, p, a.data<BFloat16>(), b.data<BFloat16>(), 0.f, y.data<float>());
      };
  }
  return [at, last = LastPlan<ProductPlan>()](KernelContext& ctx) mutable {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    Tensor& y = ctx.out(0);
    const ProductPlan& p = last.get(a.dims(), b.dims(), y.dims(), [&] { return plan_product(at, a.dims(), b.dims(), y.dims()); });
    const T* bias = nullptr;
    if (ctx.has_in(2)) {
      if (ctx.in(2).rank() != 1 || ctx.in(2).dim(0) != p.n)
        throw ShapeError(fmt(at.where, ": input 2 (bias) is ", describe(ctx.in(2)), ", expected (", p.n, ")"));
      bias = ctx.in(2).data<T>();
    }
    if (y.numel() == 0) return;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      T* out = y.data<T>();
      if (bias) fill_rows(bias, y.numel() / p.n, p.n, out, ctx.threads());
      else if (p.k == 0) std::fill(out, out + y.numel(), T{});
      if (p.k > 0) run_onednn<T>(at, p, a.data<T>(), b.data<T>(), bias ? 1.f : 0.f, out);
    } else {
      run_loop<T>(at, p, a.data<T>(), b.data<T>(), bias, y.data<T>(), ctx.threads());
    }
  };
}

}  // namespace

void register_fused_matmul_kernels(KernelTable& t) {
  t.add(kTrainrtDomain, "FusedMatMul", DType::kF32, make_fused_matmul<float>);
  t.add(kTrainrtDomain, "FusedMatMul", DType::kF64, make_fused_matmul<double>);
  t.add(kTrainrtDomain, "FusedMatMul", DType::kF16, make_fused_matmul<Half>);
  t.add(kTrainrtDomain, "FusedMatMul", DType::kBF16, make_fused_matmul<BFloat16>);
}

}  // namespace trainrt
