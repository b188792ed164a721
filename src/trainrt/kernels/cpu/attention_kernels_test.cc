// ScaledDotProductAttention and its Grad against a naive double-precision
// softmax(Q K^T * scale + mask) V that materializes the whole (L, S) matrix; dropout's
// reproducibility and drop rate; bf16 tensors against the same reference on their rounded values.
#include <cmath>
#include <limits>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/attention_blocks.h"
#include "trainrt/kernels/cpu/counter_rng.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_values;
using testing::random_tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Sizes just past the kernels' blocks, so every test has full and partial blocks.
constexpr int64_t kRows = kRowBlock + 6;
constexpr int64_t kCols = kColBlock + 22;

struct Case {
  std::string name;
  int64_t b, h, h_kv, l, s, e, ev;
  bool causal = false;
  Tensor mask;  // undefined: none
  double scale = 0;  // 0: the default 1/sqrt(E)
};

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

// Element (b, h, i, j) of a mask broadcast (right-aligned) to (B, H, L, S).
double mask_at(const Tensor& m, const int64_t idx[4]) {
  const int64_t rank = m.rank();
  int64_t offset = 0;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t axis = 4 - rank + d, size = m.dims()[static_cast<size_t>(d)];
    offset = offset * size + (size == 1 ? 0 : idx[axis]);
  }
  return m.dtype() == DType::kBool ? (m.data<bool>()[offset] ? 0.0 : -kInf) : m.to_double(offset);
}

// The naive forward and backward (for a given dO) of one case, whole (L, S) matrices in double.
// Fully masked rows give 0 (torch's CPU kernel) and a logsumexp of +inf.
Reference reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_o) {
  Reference r;
  r.o.assign(static_cast<size_t>(c.b * c.h * c.l * c.ev), 0.0);
  r.lse.assign(static_cast<size_t>(c.b * c.h * c.l), 0.0);
  r.dq.assign(static_cast<size_t>(q.numel()), 0.0);
  r.dk.assign(static_cast<size_t>(k.numel()), 0.0);
  r.dv.assign(static_cast<size_t>(v.numel()), 0.0);
  const double scale = c.scale != 0 ? c.scale : 1 / std::sqrt(static_cast<double>(c.e));
  for (int64_t b = 0; b < c.b; ++b) {
    for (int64_t h = 0; h < c.h; ++h) {
      const int64_t qh = b * c.h + h, kh = b * c.h_kv + h / (c.h / c.h_kv);
      for (int64_t i = 0; i < c.l; ++i) {
        std::vector<double> p(static_cast<size_t>(c.s));
        double mx = -kInf;
        for (int64_t j = 0; j < c.s; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < c.e; ++x) dot += q.to_double((qh * c.l + i) * c.e + x) * k.to_double((kh * c.s + j) * c.e + x);
          const int64_t idx[4] = {b, h, i, j};
          double sc = dot * scale + (c.mask.defined() ? mask_at(c.mask, idx) : 0.0);
          if (c.causal && j > i) sc = -kInf;
          p[static_cast<size_t>(j)] = sc;
          mx = std::max(mx, sc);
        }
        const int64_t row = qh * c.l + i;
        if (mx == -kInf) {
          r.lse[static_cast<size_t>(row)] = kInf;
          continue;
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (double& x : p) x /= sum;
        r.lse[static_cast<size_t>(row)] = mx + std::log(sum);
        // O = P V; dV += P^T dO; dP = dO V^T; dS = P (dP - sum P dP); dQ, dK.
        std::vector<double> dp(static_cast<size_t>(c.s), 0.0);
        double pdp = 0;
        for (int64_t j = 0; j < c.s; ++j) {
          const double pj = p[static_cast<size_t>(j)];
          for (int64_t y = 0; y < c.ev; ++y) {
            const double vy = v.to_double((kh * c.s + j) * c.ev + y), gy = d_o.to_double(row * c.ev + y);
            r.o[static_cast<size_t>(row * c.ev + y)] += pj * vy;
            r.dv[static_cast<size_t>((kh * c.s + j) * c.ev + y)] += pj * gy;
            dp[static_cast<size_t>(j)] += gy * vy;
          }
          pdp += pj * dp[static_cast<size_t>(j)];
        }
        for (int64_t j = 0; j < c.s; ++j) {
          const double ds = p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - pdp) * scale;
          for (int64_t x = 0; x < c.e; ++x) {
            r.dq[static_cast<size_t>(row * c.e + x)] += ds * k.to_double((kh * c.s + j) * c.e + x);
            r.dk[static_cast<size_t>((kh * c.s + j) * c.e + x)] += ds * q.to_double(row * c.e + x);
          }
        }
      }
    }
  }
  return r;
}

std::map<std::string, Attribute> attrs_of(const Case& c, double dropout_p = 0) {
  std::map<std::string, Attribute> attrs{{"is_causal", Attribute::of_int(c.causal ? 1 : 0)}};
  if (c.scale != 0) attrs["scale"] = Attribute::of_float(static_cast<float>(c.scale));
  if (dropout_p > 0) attrs["dropout_p"] = Attribute::of_float(static_cast<float>(dropout_p));
  return attrs;
}

std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::map<std::string, Attribute>& attrs, int outputs, uint64_t seed = 0) {
  return run_node({.op = op, .attrs = attrs, .num_outputs = outputs, .domain = std::string(kTrainrtDomain),
                   .random_seed = seed},
                  inputs, cpu_kernel_table());
}

void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const Tensor q = random_tensor({c.b, c.h, c.l, c.e}, 1, -2.f, 2.f);
  const Tensor k = random_tensor({c.b, c.h_kv, c.s, c.e}, 2, -2.f, 2.f);
  const Tensor v = random_tensor({c.b, c.h_kv, c.s, c.ev}, 3);
  const Tensor d_o = random_tensor({c.b, c.h, c.l, c.ev}, 4);
  const Reference r = reference(c, q, k, v, d_o);
  const std::vector<Tensor> fwd = run("ScaledDotProductAttention", {q, k, v, c.mask}, attrs_of(c), 2);
  expect_values(fwd[0], r.o, 1e-4, 1e-5, c.name + " O");
  expect_values(fwd[1], r.lse, 1e-5, 1e-5, c.name + " logsumexp");
  const std::vector<Tensor> grads =
      run("ScaledDotProductAttentionGrad", {d_o, q, k, v, fwd[0], fwd[1], c.mask}, attrs_of(c), 3);
  expect_values(grads[0], r.dq, 1e-3, 1e-4, c.name + " dQ");
  expect_values(grads[1], r.dk, 1e-3, 1e-4, c.name + " dK");
  expect_values(grads[2], r.dv, 1e-3, 1e-4, c.name + " dV");
}

Tensor to_bf16(const Tensor& x) {
  Tensor y = Tensor::empty(DType::kBF16, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<BFloat16>()[i] = BFloat16{f32_to_bf16(x.data<float>()[i])};
  return y;
}

// check_case with Q, K, V, dO and a float mask rounded to bf16. The kernels compute in f32 and
// round O, dQ, dK and dV once, so they match the reference on the rounded values within bf16's
// relative step of 2^-8; logsumexp stays f32 and matches as closely as the f32 kernel's.
void check_case_bf16(Case c) {
  SCOPED_TRACE(c.name + " (bf16)");
  const Tensor q = to_bf16(random_tensor({c.b, c.h, c.l, c.e}, 1, -2.f, 2.f));
  const Tensor k = to_bf16(random_tensor({c.b, c.h_kv, c.s, c.e}, 2, -2.f, 2.f));
  const Tensor v = to_bf16(random_tensor({c.b, c.h_kv, c.s, c.ev}, 3));
  const Tensor d_o = to_bf16(random_tensor({c.b, c.h, c.l, c.ev}, 4));
  if (c.mask.defined() && c.mask.dtype() == DType::kF32) c.mask = to_bf16(c.mask);
  const Reference r = reference(c, q, k, v, d_o);
  const std::vector<Tensor> fwd = run("ScaledDotProductAttention", {q, k, v, c.mask}, attrs_of(c), 2);
  EXPECT_EQ(fwd[0].dtype(), DType::kBF16);
  EXPECT_EQ(fwd[1].dtype(), DType::kF32);
  expect_values(fwd[0], r.o, 8e-3, 1e-3, c.name + " O");
  expect_values(fwd[1], r.lse, 1e-5, 1e-5, c.name + " logsumexp");
  const std::vector<Tensor> grads =
      run("ScaledDotProductAttentionGrad", {d_o, q, k, v, fwd[0], fwd[1], c.mask}, attrs_of(c), 3);
  // O rounded to bf16 enters D = rowsum(dO * O) (as in torch): about 3e-3 in D at E = 64, which
  // dQ and dK carry as an absolute error.
  expect_values(grads[0], r.dq, 1.5e-2, 5e-3, c.name + " dQ");
  expect_values(grads[1], r.dk, 1.5e-2, 5e-3, c.name + " dK");
  expect_values(grads[2], r.dv, 8e-3, 1e-3, c.name + " dV");
}

Tensor bool_mask(std::vector<int64_t> dims, uint32_t seed) {
  const Tensor u = random_tensor(dims, seed, 0.f, 1.f);
  Tensor m = Tensor::empty(DType::kBool, dims);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = u.data<float>()[i] < 0.7f;
  return m;
}

TEST(AttentionKernels, MatchNaiveAttentionOverShapes) {
  // Sizes around the row and column blocks, L != S, odd head sizes, Ev != E.
  check_case({"small", 2, 2, 2, 5, 7, 8, 8});
  check_case({"one element", 1, 1, 1, 1, 1, 3, 2});
  check_case({"several blocks", 1, 2, 2, kRowBlock + 2, 2 * kColBlock + 1, 16, 24});
  check_case({"L > S", 2, 1, 1, kRows, 40, 32, 5});
  check_case({"head dim 64, explicit scale", 1, 2, 2, 64, 128, 64, 64, false, {}, 0.3});
}

TEST(AttentionKernels, CausalIsTopLeftAlignedForAnyLAndS) {
  check_case({"causal square", 1, 2, 2, kRowBlock + 3, kRowBlock + 3, 16, 16, true});
  check_case({"causal L < S", 2, 1, 1, 70, kCols, 8, 8, true});
  check_case({"causal L > S", 1, 1, 1, kRows, 70, 8, 12, true});
}

TEST(AttentionKernels, GroupedQueryHeadsShareKeysAndValues) {
  check_case({"gqa 4 over 2", 2, 4, 2, 33, 65, 16, 16});
  check_case({"gqa 6 over 1, causal", 1, 6, 1, kRows, kRows, 8, 8, true});
}

TEST(AttentionKernels, MasksBroadcastToEveryHeadAndRow) {
  check_case({"bool (B, 1, 1, S)", 2, 2, 2, 9, kCols, 8, 8, false, bool_mask({2, 1, 1, kCols}, 5)});
  check_case({"bool (L, S)", 1, 2, 2, kRows, 33, 8, 8, false, bool_mask({kRows, 33}, 6)});
  check_case({"float (1, 1, L, S)", 2, 2, 2, 66, kCols, 8, 8, false, random_tensor({1, 1, 66, kCols}, 7, -3.f, 3.f)});
  check_case({"float (B, H, L, 1)", 2, 3, 3, 10, 12, 8, 8, false, random_tensor({2, 3, 10, 1}, 8)});
  check_case({"float (B, H, L, S), causal", 1, 2, 1, 20, 20, 8, 8, true, random_tensor({1, 2, 20, 20}, 9)});
}

TEST(AttentionKernels, FullyMaskedRowsGiveZeroOutputAndGradients) {
  Tensor keep = bool_mask({1, 1, kRows, kCols}, 10);
  for (int64_t j = 0; j < kCols; ++j) {
    keep.data<bool>()[3 * kCols + j] = false;  // row 3 and a row of the second row block see nothing
    keep.data<bool>()[(kRowBlock + 2) * kCols + j] = false;
  }
  check_case({"bool, two rows masked", 2, 2, 2, kRows, kCols, 8, 8, false, keep});
  Tensor add = random_tensor({kRows, kCols}, 11);
  for (int64_t j = 0; j < kCols; ++j) add.data<float>()[5 * kCols + j] = -std::numeric_limits<float>::infinity();
  check_case({"float, row 5 all -inf", 1, 2, 2, kRows, kCols, 8, 8, false, add});
  const std::vector<Tensor> fwd =
      run("ScaledDotProductAttention", {random_tensor({1, 1, kRows, 8}, 1), random_tensor({1, 1, kCols, 8}, 2),
                                        random_tensor({1, 1, kCols, 8}, 3), keep}, {}, 2);
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(fwd[0].data<float>()[3 * 8 + c], 0.f);
  EXPECT_EQ(fwd[1].data<float>()[3], std::numeric_limits<float>::infinity());
}

TEST(AttentionKernels, Bf16ComputesInF32AndRoundsOnce) {
  check_case_bf16({"several blocks", 1, 2, 2, kRowBlock + 2, 2 * kColBlock + 1, 16, 24});
  check_case_bf16({"head dim 64, explicit scale", 1, 2, 2, 64, 128, 64, 64, false, {}, 0.3});
  check_case_bf16({"causal L > S", 1, 1, 1, kRows, 70, 8, 12, true});
  check_case_bf16({"gqa 6 over 1, causal", 1, 6, 1, kRows, kRows, 8, 8, true});
  check_case_bf16({"bool (B, 1, 1, S)", 2, 2, 2, 9, kCols, 8, 8, false, bool_mask({2, 1, 1, kCols}, 5)});
  check_case_bf16({"float (B, H, L, S), causal", 1, 2, 1, 20, 20, 8, 8, true, random_tensor({1, 2, 20, 20}, 9)});
  Tensor keep = bool_mask({1, 1, kRows, 40}, 10);
  for (int64_t j = 0; j < 40; ++j) keep.data<bool>()[3 * 40 + j] = false;
  check_case_bf16({"bool, row 3 masked", 2, 2, 2, kRows, 40, 8, 8, false, keep});
}

// A float mask with bf16 Q is bf16 (autocast casts it) or f32; dS, the mask's gradient, has its
// dtype and equals the f32 kernel's on the same values within bf16 rounding.
TEST(AttentionKernels, Bf16MasksOfEitherFloatDtypeGetTheirGradient) {
  const Tensor q = random_tensor({1, 2, 20, 8}, 1, -2.f, 2.f), k = random_tensor({1, 1, 30, 8}, 2, -2.f, 2.f);
  const Tensor v = random_tensor({1, 1, 30, 8}, 3), d_o = random_tensor({1, 2, 20, 8}, 4);
  const Tensor mask = to_bf16(random_tensor({1, 2, 20, 30}, 5, -3.f, 3.f));
  const auto widen = [](const Tensor& x) {
    Tensor y = Tensor::empty(DType::kF32, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = static_cast<float>(x.to_double(i));
    return y;
  };
  const Tensor qb = to_bf16(q), kb = to_bf16(k), vb = to_bf16(v), d_ob = to_bf16(d_o), mask_f = widen(mask);
  const std::vector<Tensor> ref = run("ScaledDotProductAttention", {widen(qb), widen(kb), widen(vb), mask_f}, {}, 2);
  const std::vector<Tensor> ref_grads = run("ScaledDotProductAttentionGrad",
                                            {widen(d_ob), widen(qb), widen(kb), widen(vb), ref[0], ref[1], mask_f}, {}, 4);
  std::vector<double> ds(static_cast<size_t>(ref_grads[3].numel()));
  for (size_t i = 0; i < ds.size(); ++i) ds[i] = ref_grads[3].to_double(static_cast<int64_t>(i));
  for (const Tensor& m : {mask, mask_f}) {
    SCOPED_TRACE(dtype_name(m.dtype()));
    const std::vector<Tensor> fwd = run("ScaledDotProductAttention", {qb, kb, vb, m}, {}, 2);
    const std::vector<Tensor> grads =
        run("ScaledDotProductAttentionGrad", {d_ob, qb, kb, vb, fwd[0], fwd[1], m}, {}, 4);
    EXPECT_EQ(grads[3].dtype(), m.dtype());
    expect_values(grads[3], ds, 1.5e-2, 1e-3, "dS");
  }
}

TEST(AttentionKernels, BadShapesAreShapeErrorsNamingTheInputs) {
  const Tensor q = random_tensor({1, 4, 5, 8}, 1), k = random_tensor({1, 3, 6, 8}, 2), v = random_tensor({1, 3, 6, 8}, 3);
  try {
    run("ScaledDotProductAttention", {q, k, v}, {}, 2);
    ADD_FAILURE() << "4 heads over 3 key heads ran";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(1, 3, 6, 8)"), std::string::npos) << e.what();
  }
  const Tensor k2 = random_tensor({1, 2, 6, 7}, 2);
  EXPECT_THROW(run("ScaledDotProductAttention", {q, k2, random_tensor({1, 2, 6, 8}, 3)}, {}, 2), ShapeError);
  EXPECT_THROW(run("ScaledDotProductAttention", {q, random_tensor({1, 2, 6, 8}, 2), random_tensor({1, 2, 6, 8}, 3),
                                                 bool_mask({5, 7}, 1)}, {}, 2),
               ShapeError);
}

// With V = I (S = Ev), O[i][j] = P[i][j] * keep[i][j] / (1 - p): the drawn mask is visible.
TEST(AttentionKernels, DropoutIsReproducibleAndDropsAboutP) {
  const int64_t b = 2, h = 2, l = kRows, s = 64;
  const double p = 0.3;
  const Tensor q = random_tensor({b, h, l, 16}, 1), k = random_tensor({b, h, s, 16}, 2);
  Tensor v = Tensor::empty(DType::kF32, {b, h, s, s});
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = (i / s) % s == i % s ? 1.f : 0.f;
  const auto attrs = attrs_of({"", b, h, h, l, s, 16, s}, p);
  const std::vector<Tensor> a = run("ScaledDotProductAttention", {q, k, v}, attrs, 3, 42);
  const std::vector<Tensor> again = run("ScaledDotProductAttention", {q, k, v}, attrs, 3, 42);
  const std::vector<Tensor> other = run("ScaledDotProductAttention", {q, k, v}, attrs, 3, 43);
  const std::vector<Tensor> plain = run("ScaledDotProductAttention", {q, k, v}, {}, 2);
  EXPECT_EQ(a[2].data<int64_t>()[0], 42);
  int64_t dropped = 0, differ = 0;
  bool keep[64];
  for (int64_t row = 0; row < b * h * l; ++row) {
    draw_keep(stream_key(42), row * s, (row + 1) * s, keep_threshold(p), keep);
    for (int64_t j = 0; j < s; ++j) {
      const int64_t e = row * s + j;
      EXPECT_EQ(a[0].data<float>()[e], again[0].data<float>()[e]);
      differ += a[0].data<float>()[e] != other[0].data<float>()[e];
      dropped += a[0].data<float>()[e] == 0.f;
      const double expected = keep[j] ? plain[0].data<float>()[e] / (1 - p) : 0.0;
      EXPECT_NEAR(a[0].data<float>()[e], expected, 1e-5 + 1e-5 * std::abs(expected)) << "element " << e;
    }
  }
  const double rate = static_cast<double>(dropped) / static_cast<double>(b * h * l * s);
  EXPECT_NEAR(rate, p, 0.01);  // 33280 draws: the standard deviation is 0.0025
  EXPECT_GT(differ, b * h * l * s / 4);
}

}  // namespace
}  // namespace trainrt
