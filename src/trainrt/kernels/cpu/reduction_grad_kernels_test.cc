// The fused gradient kernels of the reduction family (SoftmaxGrad, LogSoftmaxGrad,
// LayerNormalizationGrad, SoftmaxCrossEntropyLossGrad, NegativeLogLikelihoodLossGrad): f32 fast
// paths (rows, column tiles, parallel blocks) and f64 against double references written out
// here. The f64 kernels are also checked against finite differences by the gradient rules' tests.
#include <cmath>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;
using testing::expect_values;
using testing::random_tensor;

Tensor to_f64(const Tensor& x) {
  Tensor y = Tensor::empty(DType::kF64, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = x.to_double(i);
  return y;
}


std::vector<Tensor> run_grad(const std::string& op, const std::vector<Tensor>& inputs,
                             std::map<std::string, Attribute> attrs, int outputs = 1) {
  NodeSpec spec{.op = op, .attrs = std::move(attrs), .num_outputs = outputs, .domain = std::string(kTrainrtDomain)};
  return run_node(spec, inputs, cpu_kernel_table());
}

// ---- SoftmaxGrad, LogSoftmaxGrad ----

// dx of (log-)softmax for dy, y viewed as (outer, n, inner), along n, in double.
std::vector<double> softmax_grad_reference(const Tensor& dy, const Tensor& y, bool log, int64_t outer, int64_t n,
                                           int64_t inner) {
  std::vector<double> dx(static_cast<size_t>(dy.numel()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const auto at = [&](int64_t r) { return (o * n + r) * inner + j; };
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += dy.to_double(at(r)) * (log ? 1.0 : y.to_double(at(r)));
      for (int64_t r = 0; r < n; ++r) {
        const double g = dy.to_double(at(r)), v = y.to_double(at(r));
        dx[static_cast<size_t>(at(r))] = log ? g - std::exp(v) * s : v * (g - s);
      }
    }
  return dx;
}

TEST(SoftmaxGradKernels, RowsAndColumnTilesMatchTheReference) {
  struct Case {
    std::vector<int64_t> dims;
    int64_t axis, outer, n, inner;
  };
  // Rows (one task, and many in parallel), column tiles (one, and several of 2048 columns).
  for (const Case& c : {Case{{7, 33}, -1, 7, 33, 1}, Case{{96, 1000}, 1, 96, 1000, 1},
                        Case{{2, 4, 3}, 0, 1, 2, 12}, Case{{3, 5, 2500}, 1, 3, 5, 2500}}) {
    for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
      const bool log = std::string(op) == "LogSoftmaxGrad";
      const std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(c.axis)}};
      const Tensor dy = random_tensor(c.dims, 1);
      const Tensor y = run_node(log ? "LogSoftmax" : "Softmax", {random_tensor(c.dims, 2, -3.f, 3.f)}, attrs)[0];
      const std::vector<double> want = softmax_grad_reference(dy, y, log, c.outer, c.n, c.inner);
      const std::string what = std::string(op) + " " + to_string(c.dims);
      expect_values(run_grad(op, {dy, y}, attrs)[0], want, 1e-5, 1e-6, what + " f32");
      expect_values(run_grad(op, {to_f64(dy), to_f64(y)}, attrs)[0], want, 1e-12, 1e-14, what + " f64");
    }
  }
}

// Values of a float tensor as doubles (the rounded values of a 16-bit one).
std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.to_double(i);
  return v;
}

TEST(SoftmaxGradKernels, SixteenBitComputesInFloatAndRoundsOnce) {
  // f16 / bf16 dY and Y (rows, one column tile, and staged groups of many rows) against the f32
  // kernel on the same rounded values: the 16-bit kernel widens, runs the f32 math and rounds dX
  // once, so each element is the f32 result rounded: within half an ulp of it (at most 2^-8 of
  // the value in bf16, 2^-11 in f16), plus the f32 kernel's own 1e-6 of the largest term.
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{7, 33}, {3, 5, 40}, {2, 300, 230}}) {
    for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
      const bool log = std::string(op) == "LogSoftmaxGrad";
      const std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(1)}};
      for (DType t : {DType::kF16, DType::kBF16}) {
        const std::vector<int64_t> shape = dims;
        const Tensor y32 = run_node(log ? "LogSoftmax" : "Softmax", {random_tensor(shape, 2, -3.f, 3.f)}, attrs)[0];
        const Tensor dy = testing::from_doubles(t, shape, doubles_of(random_tensor(shape, 1)));
        const Tensor y = testing::from_doubles(t, shape, doubles_of(y32));
        const Tensor dx = run_grad(op, {dy, y}, attrs)[0];
        ASSERT_EQ(dx.dtype(), t);
        const Tensor wide = run_grad(op, {testing::from_doubles(DType::kF32, shape, doubles_of(dy)),
                                          testing::from_doubles(DType::kF32, shape, doubles_of(y))}, attrs)[0];
        const double half_ulp = t == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
        expect_values(dx, doubles_of(wide), half_ulp, 1e-6, fmt(op, " ", dtype_name(t), " ", to_string(shape)));
      }
    }
  }
}

TEST(SoftmaxGradKernels, MismatchedShapesThrow) {
  EXPECT_THROW(run_grad("SoftmaxGrad", {random_tensor({2, 3}, 1), random_tensor({3, 2}, 2)}, {}), ShapeError);
}

// ---- LayerNormalizationGrad ----

struct LayerNormGradReference {
  std::vector<double> dx, dscale, dbias;
};

// x, dy: (rows, cols), scale: (cols); two-pass mean and variance, in double.
LayerNormGradReference layer_norm_grad_reference(const Tensor& dy, const Tensor& x, const Tensor& scale, int64_t rows,
                                                 int64_t cols, double epsilon) {
  const size_t n = static_cast<size_t>(cols);
  LayerNormGradReference r{std::vector<double>(n * static_cast<size_t>(rows)), std::vector<double>(n),
                           std::vector<double>(n)};
  for (int64_t i = 0; i < rows; ++i) {
    const auto at = [&](int64_t j) { return i * cols + j; };
    double mean = 0, var = 0, sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x.to_double(at(j)) / static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) var += std::pow(x.to_double(at(j)) - mean, 2) / static_cast<double>(cols);
    const double inv_std = 1 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (x.to_double(at(j)) - mean) * inv_std, g = dy.to_double(at(j)) * scale.to_double(j);
      sum_g += g;
      sum_gx += g * xhat;
      r.dscale[static_cast<size_t>(j)] += dy.to_double(at(j)) * xhat;
      r.dbias[static_cast<size_t>(j)] += dy.to_double(at(j));
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (x.to_double(at(j)) - mean) * inv_std, g = dy.to_double(at(j)) * scale.to_double(j);
      r.dx[static_cast<size_t>(at(j))] =
          inv_std * (g - sum_g / static_cast<double>(cols) - xhat * sum_gx / static_cast<double>(cols));
    }
  }
  return r;
}

TEST(LayerNormGradKernels, MatchesTheReferenceWithAndWithoutStatistics) {
  // (rows, cols): one block, and enough rows for parallel blocks with partial column sums.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 10}, {512, 256}}) {
    const Tensor x = random_tensor({rows, cols}, 3, -2.f, 3.f);
    const Tensor dy = random_tensor({rows, cols}, 4);
    const Tensor scale = random_tensor({cols}, 5);
    const Tensor bias = random_tensor({cols}, 6);
    const LayerNormGradReference want = layer_norm_grad_reference(dy, x, scale, rows, cols, 1e-5);
    const std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(-1)}};
    const std::string what = "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    // Statistics recomputed from X.
    std::vector<Tensor> got = run_grad("LayerNormalizationGrad", {dy, x, scale}, attrs, 3);
    expect_values(got[0], want.dx, 1e-4, 1e-5, what + " dX");
    expect_values(got[1], want.dscale, 1e-4, 1e-4, what + " dScale");
    expect_values(got[2], want.dbias, 1e-4, 1e-4, what + " dBias");
    std::vector<Tensor> got64 = run_grad("LayerNormalizationGrad", {to_f64(dy), to_f64(x), to_f64(scale)}, attrs, 3);
    expect_values(got64[0], want.dx, 1e-10, 1e-12, what + " f64 dX");
    expect_values(got64[1], want.dscale, 1e-10, 1e-12, what + " f64 dScale");
    // Statistics from the forward node: the same bits as recomputing them.
    std::vector<Tensor> fwd = run_node("LayerNormalization", {x, scale, bias}, attrs, 3);
    std::vector<Tensor> with_stats = run_grad("LayerNormalizationGrad", {dy, x, scale, fwd[1], fwd[2]}, attrs, 3);
    for (size_t o = 0; o < 3; ++o) testing::expect_close(with_stats[o], got[o], 0, 0);
  }
}

TEST(LayerNormGradKernels, SixteenBitComputesInFloatAndRoundsOnce) {
  // f16 / bf16 dY, X and scale (a bf16 model's LayerNorm, with and without the forward's
  // statistics; one block and parallel blocks) against the f32 kernel on the same rounded values:
  // the 16-bit kernel stages rows in float, runs the f32 math with the same blocks, and rounds each
  // output once, so every element is the f32 result rounded to the nearest 16-bit value.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 10}, {512, 256}}) {
    for (DType t : {DType::kBF16, DType::kF16}) {
      const std::vector<int64_t> shape{rows, cols};
      const auto narrow = [&](const Tensor& v) { return testing::from_doubles(t, v.dims(), doubles_of(v)); };
      const auto widen = [&](const Tensor& v) { return testing::from_doubles(DType::kF32, v.dims(), doubles_of(v)); };
      const Tensor x = narrow(random_tensor(shape, 3, -2.f, 3.f)), dy = narrow(random_tensor(shape, 4));
      const Tensor scale = narrow(random_tensor({cols}, 5)), bias = narrow(random_tensor({cols}, 6));
      const std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(-1)}};
      const std::vector<Tensor> stats = run_node("LayerNormalization", {widen(x), widen(scale), widen(bias)}, attrs, 3);
      for (bool with_stats : {false, true}) {
        std::vector<Tensor> in{dy, x, scale}, wide_in{widen(dy), widen(x), widen(scale)};
        if (with_stats) {
          in.insert(in.end(), {stats[1], stats[2]});
          wide_in.insert(wide_in.end(), {stats[1], stats[2]});
        }
        const std::vector<Tensor> got = run_grad("LayerNormalizationGrad", in, attrs, 3);
        const std::vector<Tensor> wide = run_grad("LayerNormalizationGrad", wide_in, attrs, 3);
        for (size_t o = 0; o < 3; ++o) {
          ASSERT_EQ(got[o].dtype(), t);
          testing::expect_close(got[o], narrow(wide[o]), 0, 0);
        }
      }
    }
  }
}

TEST(LayerNormGradKernels, InnerAxisBroadcastScaleAndOmittedOutputs) {
  // X (2, 3, 4) normalized over (3, 4) with a scale of (4) broadcast over the 3.
  const Tensor x = random_tensor({2, 3, 4}, 7);
  const Tensor dy = random_tensor({2, 3, 4}, 8);
  const Tensor scale = random_tensor({4}, 9);
  Tensor full = Tensor::empty(DType::kF32, {12});
  for (int64_t j = 0; j < 12; ++j) full.data<float>()[j] = scale.data<float>()[j % 4];
  const LayerNormGradReference want = layer_norm_grad_reference(dy, x, full, 2, 12, 0.25);
  NodeSpec spec{.op = "LayerNormalizationGrad",
                .attrs = {{"axis", Attribute::of_int(1)}, {"epsilon", Attribute::of_float(0.25f)}},
                .num_outputs = 2,
                .domain = std::string(kTrainrtDomain)};
  std::vector<Tensor> got = run_node(spec, {dy, x, scale}, cpu_kernel_table());
  EXPECT_EQ(got[1].dims(), (std::vector<int64_t>{3, 4}));
  expect_values(got[0], want.dx, 1e-5, 1e-6, "dX");
  expect_values(got[1], want.dscale, 1e-5, 1e-6, "dScale");
}

// ---- SoftmaxCrossEntropyLossGrad, NegativeLogLikelihoodLossGrad ----

// dX for scores (N, C, D) given as log_prob (softmax) or ignored (nll), in double.
std::vector<double> loss_grad_reference(bool softmax, const Tensor& dloss, const Tensor& log_prob,
                                        const std::vector<int64_t>& labels, const Tensor* weights,
                                        const std::string& reduction, int64_t ignore, int64_t n, int64_t c,
                                        int64_t d) {
  std::vector<double> dx(static_cast<size_t>(n * c * d), 0.0);
  double total = 0;
  for (int64_t t : labels) total += t == ignore ? 0 : weights ? weights->to_double(t) : 1;
  for (int64_t i = 0; i < n * d; ++i) {
    const int64_t t = labels[static_cast<size_t>(i)], s = i / d, k = i % d;
    if (t == ignore) continue;
    double f = (weights ? weights->to_double(t) : 1) * dloss.to_double(reduction == "none" ? i : 0);
    if (reduction == "mean") f /= total;
    for (int64_t cls = 0; cls < c; ++cls) {
      const int64_t e = (s * c + cls) * d + k;
      dx[static_cast<size_t>(e)] = ((softmax ? std::exp(log_prob.to_double(e)) : 0.0) - (cls == t)) * f;
    }
  }
  return dx;
}

TEST(LossGradKernels, MatchTheReferenceOverReductionsWeightsAndIgnoredLabels) {
  struct Case {
    int64_t n, c, d;
  };
  for (const Case& cs : {Case{6, 5, 1}, Case{300, 1000, 1}, Case{3, 4, 7}}) {
    std::vector<int64_t> dims{cs.n, cs.c}, label_dims{cs.n};
    if (cs.d > 1) {
      dims.push_back(cs.d);
      label_dims.push_back(cs.d);
    }
    Tensor labels = Tensor::empty(DType::kI32, label_dims);
    std::vector<int64_t> label_values;
    for (int64_t i = 0; i < cs.n * cs.d; ++i) {
      label_values.push_back(i % 4 == 3 ? -1 : (i * 7) % cs.c);
      labels.data<int32_t>()[i] = static_cast<int32_t>(label_values.back());
    }
    const Tensor log_prob = random_tensor(dims, 10, -6.f, 0.f);
    const Tensor weights = random_tensor({cs.c}, 11, 0.5f, 2.f);
    for (const char* reduction : {"none", "sum", "mean"}) {
      const bool none = std::string(reduction) == "none";
      const Tensor dloss = none ? random_tensor(label_dims, 12) : make_tensor<float>({}, {0.75f});
      const std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)},
                                                   {"ignore_index", Attribute::of_int(-1)}};
      const std::string what = std::string(reduction) + " " + to_string(dims);
      const Tensor shape = Tensor::from_i64(dims);
      for (const Tensor* w : {static_cast<const Tensor*>(nullptr), &weights}) {
        std::vector<Tensor> sce{dloss, log_prob, labels}, nll{dloss, shape, labels};
        if (w) {
          sce.push_back(*w);
          nll.push_back(*w);
        }
        expect_values(run_grad("SoftmaxCrossEntropyLossGrad", sce, attrs)[0],
                      loss_grad_reference(true, dloss, log_prob, label_values, w, reduction, -1, cs.n, cs.c, cs.d),
                      1e-5, 1e-7, "softmax cross-entropy " + what);
        expect_values(run_grad("NegativeLogLikelihoodLossGrad", nll, attrs)[0],
                      loss_grad_reference(false, dloss, log_prob, label_values, w, reduction, -1, cs.n, cs.c, cs.d),
                      1e-6, 0, "nll " + what);
      }
    }
  }
}

TEST(LossGradKernels, SixteenBitComputesInFloatAndRoundsOnce) {
  // A bf16 / f16 model's loss: dLoss, log_prob and weights in that dtype, (N, C) and (N, C, D),
  // every reduction, ignored labels. The kernel stages each slab in float and rounds dX once: the
  // f32 kernel's result on the same rounded inputs, rounded.
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{6, 5}, {3, 4, 7}}) {
    const int64_t n = dims[0], d = dims.size() == 3 ? dims[2] : 1;
    std::vector<int64_t> label_dims{n};
    if (dims.size() == 3) label_dims.push_back(d);
    Tensor labels = Tensor::empty(DType::kI64, label_dims);
    for (int64_t i = 0; i < n * d; ++i) labels.data<int64_t>()[i] = i % 4 == 3 ? -1 : (i * 7) % dims[1];
    for (DType t : {DType::kBF16, DType::kF16}) {
      const auto narrow = [&](const Tensor& v) { return testing::from_doubles(t, v.dims(), doubles_of(v)); };
      const auto widen = [&](const Tensor& v) { return testing::from_doubles(DType::kF32, v.dims(), doubles_of(v)); };
      const Tensor log_prob = narrow(random_tensor(dims, 10, -6.f, 0.f));
      const Tensor weights = narrow(random_tensor({dims[1]}, 11, 0.5f, 2.f));
      for (const char* reduction : {"none", "sum", "mean"}) {
        const bool none = std::string(reduction) == "none";
        const Tensor dloss = narrow(none ? random_tensor(label_dims, 12) : make_tensor<float>({}, {0.75f}));
        const std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)},
                                                     {"ignore_index", Attribute::of_int(-1)}};
        for (const char* op : {"SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
          const bool softmax = std::string(op) == "SoftmaxCrossEntropyLossGrad";
          const Tensor second = softmax ? log_prob : Tensor::from_i64(dims);
          const Tensor got = run_grad(op, {dloss, second, labels, weights}, attrs)[0];
          const Tensor wide = run_grad(op, {widen(dloss), softmax ? widen(log_prob) : second, labels, widen(weights)},
                                       attrs)[0];
          ASSERT_EQ(got.dtype(), t);
          testing::expect_close(got, narrow(wide), 0, 0);
        }
      }
    }
  }
}

TEST(LossGradKernels, LabelOutsideTheClassesThrowsNamingIt) {
  const Tensor labels = make_tensor<int64_t>({2}, {1, 3});
  try {
    run_grad("SoftmaxCrossEntropyLossGrad", {make_tensor<float>({}, {1.f}), random_tensor({2, 3}, 1), labels},
             {{"reduction", Attribute::of_string("sum")}});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("label 3"), std::string::npos) << e.what();
  }
}

// ---- ReduceSumToShape ----

// X (dims) summed to `target` in double, the sum rounded to X's dtype.
Tensor reduce_sum_to_shape_reference(const Tensor& x, const std::vector<int64_t>& target) {
  const size_t rank = x.dims().size();
  std::vector<int64_t> yd(rank, 1);
  std::copy(target.begin(), target.end(), yd.end() - static_cast<std::ptrdiff_t>(target.size()));
  std::vector<double> sums(static_cast<size_t>(numel_of(target)), 0.0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t rest = e, offset = 0, stride = 1;
    for (size_t i = rank; i-- > 0;) {
      const int64_t coord = rest % x.dims()[i];
      rest /= x.dims()[i];
      if (yd[i] != 1) offset += coord * stride;
      stride *= yd[i];
    }
    sums[static_cast<size_t>(offset)] += x.to_double(e);
  }
  return testing::from_doubles(x.dtype(), target, sums);
}

// The bias gradient (leading axes summed) and a middle axis summed, in every float dtype: the
// 16-bit ones within one step of the double sum, which they reach by summing in f32.
TEST(ReduceSumToShape, EveryFloatDtypeAgainstDouble) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 6, 5}, {5}}, {{3, 7, 2}, {3, 1, 2}}, {{2, 3}, {1, 1}}, {{0, 3}, {3}}};
  for (DType t : testing::kFloatDTypes)
    for (const auto& [xd, yd] : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " " << to_string(xd) << " -> " << to_string(yd));
      const Tensor x = testing::random_of(t, xd, 7, -1, 1);
      const Tensor y = run_grad("ReduceSumToShape", {x, make_tensor<int64_t>({static_cast<int64_t>(yd.size())}, yd)}, {})[0];
      ASSERT_EQ(y.dtype(), t);
      const double tol = t == DType::kF64 ? 1e-12 : t == DType::kF32 ? 1e-5 : 2 * testing::dtype_rtol(t);
      testing::expect_close(y, reduce_sum_to_shape_reference(x, yd), tol, tol);
    }
}

// 1024 rows of ones: a bf16 running sum would stop at 256 (256 + 1 rounds to 256); bf16 holds
// 1024 exactly.
TEST(ReduceSumToShape, Bf16SumsInF32) {
  const Tensor x = testing::from_doubles(DType::kBF16, {1024, 3}, std::vector<double>(3072, 1.0));
  const Tensor y = run_grad("ReduceSumToShape", {x, make_tensor<int64_t>({1}, {3})}, {})[0];
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(y.to_double(i), 1024.0) << "element " << i;
}

}  // namespace
}  // namespace trainrt
