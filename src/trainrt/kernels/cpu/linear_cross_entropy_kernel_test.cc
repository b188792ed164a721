// LinearSoftmaxCrossEntropy against a double reference: both weight layouts, bias, ignored rows,
// mean and sum, several row blocks, i32 labels, and bad labels named.
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/ops/linear_cross_entropy_block.h"

namespace trainrt {
namespace {

using testing::expect_values;
using testing::random_tensor;
using testing::to_bf16;

struct Case {
  int64_t n = 7, k = 5, classes = 11;
  bool trans_w = true, bias = false, mean = true;
  std::optional<int64_t> ignore_index;
};

struct Reference {
  double loss = 0;
  std::vector<double> dx, dw, db;
};

double bf16_rounded(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

// scores = X W^T + B (or X W + B), loss = softmax cross-entropy, and its gradients, in double.
// `bf16`: the bf16 head's roundings, the scores and their gradient each rounded to bf16.
Reference reference(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& labels,
                    bool bf16 = false) {
  const auto weight = [&](int64_t cls, int64_t j) {  // W as (C, K)
    return w.to_double(c.trans_w ? cls * c.k + j : j * c.classes + cls);
  };
  Reference r;
  r.dx.assign(static_cast<size_t>(c.n * c.k), 0);
  r.dw.assign(static_cast<size_t>(c.classes * c.k), 0);
  r.db.assign(static_cast<size_t>(c.classes), 0);
  double counted = 0;
  for (int64_t i = 0; i < c.n; ++i) counted += !(c.ignore_index && labels.to_i64(i) == *c.ignore_index);
  std::vector<double> s(static_cast<size_t>(c.classes));
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t t = labels.to_i64(i);
    if (c.ignore_index && t == *c.ignore_index) continue;
    double m = -INFINITY, sum = 0;
    for (int64_t cls = 0; cls < c.classes; ++cls) {
      double v = c.bias ? b.to_double(cls) : 0;
      for (int64_t j = 0; j < c.k; ++j) v += x.to_double(i * c.k + j) * weight(cls, j);
      if (bf16) v = bf16_rounded(v);
      s[static_cast<size_t>(cls)] = v;
      m = std::max(m, v);
    }
    for (double v : s) sum += std::exp(v - m);
    r.loss += m + std::log(sum) - s[static_cast<size_t>(t)];
    const double f = c.mean ? 1 / counted : 1;
    for (int64_t cls = 0; cls < c.classes; ++cls) {
      double d = f * (std::exp(s[static_cast<size_t>(cls)] - m) / sum - (cls == t));
      if (bf16) d = bf16_rounded(d);
      r.db[static_cast<size_t>(cls)] += d;
      for (int64_t j = 0; j < c.k; ++j) {
        r.dx[static_cast<size_t>(i * c.k + j)] += d * weight(cls, j);
        r.dw[static_cast<size_t>(c.trans_w ? cls * c.k + j : j * c.classes + cls)] += d * x.to_double(i * c.k + j);
      }
    }
  }
  if (c.mean) r.loss /= counted;
  return r;
}

// `scores_block`: with output 4, the block of scores the kernel works in given to it.
std::vector<Tensor> run_fused(const Case& c, const std::vector<Tensor>& inputs, bool scores_block = false) {
  NodeSpec spec{.op = "LinearSoftmaxCrossEntropy",
                .attrs = {{"trans_w", Attribute::of_int(c.trans_w)},
                          {"reduction", Attribute::of_string(c.mean ? "mean" : "sum")}},
                .num_outputs = scores_block ? 5 : 4,
                .domain = std::string(kTrainrtDomain)};
  if (c.ignore_index) spec.attrs["ignore_index"] = Attribute::of_int(*c.ignore_index);
  return run_node(spec, inputs, cpu_kernel_table());
}

Tensor labels_for(const Case& c, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kI64, {c.n});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < c.n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % c.classes);
  if (c.ignore_index) t.data<int64_t>()[c.n / 2] = t.data<int64_t>()[0] = *c.ignore_index;
  return t;
}

void check(const Case& c, const std::string& what, uint32_t seed) {
  const Tensor x = random_tensor({c.n, c.k}, seed, -2.f, 2.f);
  const Tensor w = random_tensor(c.trans_w ? std::vector<int64_t>{c.classes, c.k} : std::vector<int64_t>{c.k, c.classes},
                                 seed + 1, -1.f, 1.f);
  const Tensor b = random_tensor({c.classes}, seed + 2);
  const Tensor labels = labels_for(c, seed + 3);
  const std::vector<Tensor> out = run_fused(c, {x, w, labels, c.bias ? b : Tensor()});
  const Reference r = reference(c, x, w, b, labels);
  expect_values(out[0], {r.loss}, 1e-5, 1e-6, "loss " + what);
  expect_values(out[1], r.dx, 1e-4, 1e-6, "dX " + what);
  expect_values(out[2], r.dw, 1e-4, 1e-6, "dW " + what);
  if (c.bias) expect_values(out[3], r.db, 1e-4, 1e-6, "dB " + what);
  // In a block given as output 4 (the plan's arena buffer): the same bits.
  const std::vector<Tensor> in_block = run_fused(c, {x, w, labels, c.bias ? b : Tensor()}, true);
  ASSERT_EQ(in_block.size(), 5u);
  EXPECT_EQ(in_block[4].dims(), (std::vector<int64_t>{linear_cross_entropy_block_rows(c.classes), c.classes}));
  for (size_t i = 0; i < 3; ++i) testing::expect_close(in_block[i], out[i], 0, 0);
}

TEST(LinearCrossEntropyKernel, EveryLayoutBiasReductionAndIgnoredRows) {
  uint32_t seed = 10;
  for (bool trans_w : {true, false})
    for (bool bias : {false, true})
      for (bool mean : {true, false})
        for (std::optional<int64_t> ignore : std::vector<std::optional<int64_t>>{{}, -100, 3}) {
          const Case c{.trans_w = trans_w, .bias = bias, .mean = mean, .ignore_index = ignore};
          check(c, fmt(trans_w ? "W (C, K)" : "W (K, C)", bias ? " bias" : "", mean ? " mean" : " sum", " ignore ",
                       ignore ? *ignore : 0),
                seed += 4);
        }
}

// 300 rows of 8192 classes: a block holds 128 rows, so three blocks (128, 128, 44) and dW summed
// over them.
TEST(LinearCrossEntropyKernel, RowsInSeveralBlocks) {
  const Case c{.n = 300, .k = 6, .classes = 8192, .bias = true, .ignore_index = -100};
  check(c, "three blocks", 1);
}

// On bf16 X, W and B (autocast's head): bf16 gradients within bf16's rounding of the reference that
// rounds the scores and their gradient as the unfused bf16 nodes do, over one block and three, with
// the workspace given as output 4 or taken by the kernel (the same bits).
TEST(LinearCrossEntropyKernel, Bf16OperandsGiveTheBf16HeadsLossAndGradients) {
  uint32_t seed = 40;
  for (const Case& c : {Case{.bias = true, .ignore_index = -100}, Case{.trans_w = false, .mean = false},
                        Case{.n = 300, .k = 6, .classes = 8192, .bias = true, .ignore_index = -100}}) {
    SCOPED_TRACE(fmt("n ", c.n, " classes ", c.classes, " trans_w ", c.trans_w));
    const Tensor x = to_bf16(random_tensor({c.n, c.k}, seed, -2.f, 2.f));
    const Tensor w = to_bf16(random_tensor(
        c.trans_w ? std::vector<int64_t>{c.classes, c.k} : std::vector<int64_t>{c.k, c.classes}, seed + 1, -1.f, 1.f));
    const Tensor b = to_bf16(random_tensor({c.classes}, seed + 2));
    const Tensor labels = labels_for(c, seed + 3);
    seed += 4;
    const std::vector<Tensor> inputs = {x, w, labels, c.bias ? b : Tensor()};
    const std::vector<Tensor> out = run_fused(c, inputs);
    for (size_t i = 1; i < 3; ++i) EXPECT_EQ(out[i].dtype(), DType::kBF16) << "output " << i;
    EXPECT_EQ(out[0].dtype(), DType::kF32);
    const Reference r = reference(c, x, w, b, labels, /*bf16=*/true);
    expect_values(out[0], {r.loss}, 1e-4, 1e-6, "loss");
    expect_values(out[1], r.dx, 1e-2, 1e-4, "dX");
    expect_values(out[2], r.dw, 1e-2, 1e-4, "dW");
    if (c.bias) expect_values(out[3], r.db, 1e-2, 1e-4, "dB");
    const std::vector<Tensor> in_workspace = run_fused(c, inputs, true);
    ASSERT_EQ(in_workspace.size(), 5u);
    EXPECT_EQ(in_workspace[4].rank(), 1);
    for (size_t i = 0; i < (c.bias ? 4u : 3u); ++i) testing::expect_close(in_workspace[i], out[i], 0, 0);
  }
}

TEST(LinearCrossEntropyKernel, Int32LabelsAndEveryRowIgnored) {
  Case c;
  const Tensor x = random_tensor({c.n, c.k}, 5);
  const Tensor w = random_tensor({c.classes, c.k}, 6);
  const Tensor labels64 = labels_for(c, 7);
  Tensor labels32 = Tensor::empty(DType::kI32, {c.n});
  for (int64_t i = 0; i < c.n; ++i) labels32.data<int32_t>()[i] = static_cast<int32_t>(labels64.to_i64(i));
  const Reference r = reference(c, x, w, Tensor(), labels64);
  expect_values(run_fused(c, {x, w, labels32})[0], {r.loss}, 1e-5, 1e-6, "i32 labels");
  // As torch (and SoftmaxCrossEntropyLoss + its Grad): a mean over no row is NaN, and so are its gradients.
  c.ignore_index = 1;
  const Tensor all_ignored = Tensor::from_i64(std::vector<int64_t>(static_cast<size_t>(c.n), 1));
  const std::vector<Tensor> out = run_fused(c, {x, w, all_ignored});
  EXPECT_TRUE(std::isnan(out[0].to_double(0)));
  EXPECT_TRUE(std::isnan(out[1].to_double(0)));
}

TEST(LinearCrossEntropyKernel, ALabelOutOfRangeIsNamed) {
  const Case c;
  Tensor labels = labels_for(c, 8);
  labels.data<int64_t>()[4] = 11;
  try {
    run_fused(c, {random_tensor({c.n, c.k}, 9), random_tensor({c.classes, c.k}, 10), labels});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("label 11 at position 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
