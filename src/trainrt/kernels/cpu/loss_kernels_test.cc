// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss kernels against a double reference.
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::make_tensor;
using testing::expect_values;
using testing::random_tensor;

struct Case {
  std::string reduction = "mean";
  std::optional<int64_t> ignore_index;
  bool weights = false;
};

struct Reference {
  std::vector<double> loss;  // per sample for "none", else one value
  std::vector<double> log_prob;
};

// scores (N, C, D...) with labels (N, D...): the ONNX reference semantics, in double.
Reference reference(const Tensor& scores, const Tensor& labels, const Tensor* weights, const Case& c, bool softmax) {
  const int64_t n = scores.dim(0), classes = scores.dim(1), d = scores.numel() / (n * classes);
  Reference r;
  r.log_prob.resize(static_cast<size_t>(scores.numel()));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < d; ++k) {
      const auto at = [&](int64_t cls) { return (i * classes + cls) * d + k; };
      double m = -INFINITY, s = 0;
      for (int64_t cls = 0; cls < classes; ++cls) m = std::max(m, scores.to_double(at(cls)));
      for (int64_t cls = 0; cls < classes; ++cls) s += std::exp(scores.to_double(at(cls)) - m);
      for (int64_t cls = 0; cls < classes; ++cls)
        r.log_prob[static_cast<size_t>(at(cls))] =
            softmax ? scores.to_double(at(cls)) - m - std::log(s) : scores.to_double(at(cls));
    }
  }
  double total = 0, weight_total = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int64_t t = labels.to_i64(i);
    double loss = 0;
    if (!(c.ignore_index && t == *c.ignore_index)) {
      const double w = weights ? weights->to_double(t) : 1.0;
      loss = -w * r.log_prob[static_cast<size_t>((i / d * classes + t) * d + i % d)];
      weight_total += w;
    }
    total += loss;
    if (c.reduction == "none") r.loss.push_back(loss);
  }
  if (c.reduction == "sum") r.loss.push_back(total);
  if (c.reduction == "mean") r.loss.push_back(total / weight_total);
  return r;
}

std::vector<Tensor> run_loss(const std::string& op, const Case& c, const std::vector<Tensor>& inputs,
                             int num_outputs = 1) {
  NodeSpec spec{.op = op, .attrs = {{"reduction", Attribute::of_string(c.reduction)}}, .num_outputs = num_outputs};
  if (c.ignore_index) spec.attrs["ignore_index"] = Attribute::of_int(*c.ignore_index);
  return run_node(spec, inputs, cpu_kernel_table());
}


Tensor random_labels(std::vector<int64_t> dims, int64_t classes, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kI64, std::move(dims));
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % classes);
  return t;
}

// Every combination of reduction, ignore_index (none, a class, a negative value) and weights,
// on (N, C) and (N, C, d1, d2) inputs, for both ops; SCE also with its log_prob output.
TEST(LossKernels, EveryReductionIgnoreIndexAndWeightCombination) {
  const std::vector<std::vector<int64_t>> shapes = {{7, 5}, {3, 5, 2, 7}};
  for (const auto& shape : shapes) {
    const Tensor scores = random_tensor(shape, 1, -3.f, 3.f);
    std::vector<int64_t> label_dims = shape;
    label_dims.erase(label_dims.begin() + 1);
    const Tensor labels = random_labels(label_dims, 5, 2);
    const Tensor weights = random_tensor({5}, 3, 0.1f, 1.f);
    for (const char* reduction : {"none", "sum", "mean"}) {
      // No ignore_index; a negative one (like PyTorch's -100); one that is a real class.
      for (std::optional<int64_t> ignore : std::vector<std::optional<int64_t>>{{}, -1, 2}) {
        for (bool with_weights : {false, true}) {
          const Case c{reduction, ignore, with_weights};
          Tensor lab = labels.clone();
          lab.data<int64_t>()[0] = ignore ? *ignore : 1;
          const std::vector<Tensor> in = {scores, lab, with_weights ? weights : Tensor()};
          const std::string what = fmt(to_string(shape), " ", reduction, " ignore ", ignore ? *ignore : 99,
                                       with_weights ? " weights" : "");
          const Reference nll = reference(scores, lab, with_weights ? &weights : nullptr, c, false);
          expect_values(run_loss("NegativeLogLikelihoodLoss", c, in)[0], nll.loss, 1e-6, 1e-7, "NLL " + what);
          const Reference sce = reference(scores, lab, with_weights ? &weights : nullptr, c, true);
          const std::vector<Tensor> out = run_loss("SoftmaxCrossEntropyLoss", c, in, 2);
          expect_values(out[0], sce.loss, 1e-5, 1e-6, "SCE " + what);
          expect_values(out[1], sce.log_prob, 1e-5, 1e-6, "SCE log_prob " + what);
          if (std::string(reduction) == "none") EXPECT_EQ(out[0].dims(), label_dims) << what;
          else EXPECT_EQ(out[0].rank(), 0) << what;
        }
      }
    }
  }
}

TEST(LossKernels, Int32LabelsAndFiveSpatialDims) {
  const Tensor scores = random_tensor({2, 3, 2, 1, 3, 2, 2}, 4);
  const Tensor labels64 = random_labels({2, 2, 1, 3, 2, 2}, 3, 5);
  Tensor labels32 = Tensor::empty(DType::kI32, labels64.dims());
  for (int64_t i = 0; i < labels64.numel(); ++i) labels32.data<int32_t>()[i] = static_cast<int32_t>(labels64.to_i64(i));
  const Case c{"mean", {}, false};
  const Reference r = reference(scores, labels64, nullptr, c, true);
  expect_values(run_loss("SoftmaxCrossEntropyLoss", c, {scores, labels32})[0], r.loss, 1e-5, 1e-6, "i32 labels");
}

TEST(LossKernels, DoubleAndSixteenBitScores) {
  const Tensor scores = random_tensor({6, 11}, 6, -4.f, 4.f);
  const Tensor labels = random_labels({6}, 11, 7);
  const Case c{"mean", {}, false};
  for (DType t : {DType::kF64, DType::kF16, DType::kBF16}) {
    Tensor st = Tensor::empty(t, scores.dims());
    for (int64_t i = 0; i < scores.numel(); ++i) {
      const float v = scores.data<float>()[i];
      if (t == DType::kF64) st.data<double>()[i] = v;
      else st.data<uint16_t>()[i] = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
    }
    const std::vector<Tensor> out = run_loss("SoftmaxCrossEntropyLoss", c, {st, labels}, 2);
    ASSERT_EQ(out[0].dtype(), t);
    const Reference r = reference(st, labels, nullptr, c, true);
    const double tol = t == DType::kF64 ? 1e-12 : t == DType::kF16 ? 2e-3 : 1e-2;
    expect_values(out[0], r.loss, tol, tol, fmt(dtype_name(t), " loss"));
    expect_values(out[1], r.log_prob, tol, tol, fmt(dtype_name(t), " log_prob"));
  }
}

TEST(LossKernels, ManyClassesTakeTheParallelPath) {
  // A language-model-like head: rows of many classes, the log-sum-exp split across threads.
  const Tensor scores = random_tensor({64, 5003}, 8, -6.f, 6.f);
  const Tensor labels = random_labels({64}, 5003, 9);
  const Case c{"mean", {}, false};
  const Reference r = reference(scores, labels, nullptr, c, true);
  expect_values(run_loss("SoftmaxCrossEntropyLoss", c, {scores, labels})[0], r.loss, 1e-6, 0, "SCE");
}

TEST(LossKernels, AllSamplesIgnoredGiveNaNMean) {
  const Tensor scores = random_tensor({2, 3}, 10);
  const Tensor labels = make_tensor<int64_t>({2}, {1, 1});
  const Tensor loss = run_loss("NegativeLogLikelihoodLoss", Case{"mean", 1, false}, {scores, labels})[0];
  EXPECT_TRUE(std::isnan(loss.to_double(0)));
}

TEST(LossKernels, LabelOutOfRangeNamesNodeAndPosition) {
  const Tensor scores = random_tensor({3, 4}, 11);
  const Tensor labels = make_tensor<int64_t>({3}, {0, 4, 1});
  try {
    run_loss("SoftmaxCrossEntropyLoss", Case{}, {scores, labels});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(SoftmaxCrossEntropyLoss)"), std::string::npos) << m;
    EXPECT_NE(m.find("label 4 at position 1"), std::string::npos) << m;
  }
  // The same label is fine when it is the ignore_index.
  EXPECT_NO_THROW(run_loss("NegativeLogLikelihoodLoss", Case{"sum", 4, false}, {scores, labels}));
}

TEST(LossKernels, ShapeMismatchesNameTheNode) {
  const Tensor scores = random_tensor({3, 4, 2}, 12);
  const Tensor labels = random_labels({3, 2}, 4, 13);
  const auto error_of = [&](const std::string& op, const Case& c, const std::vector<Tensor>& in) -> std::string {
    try {
      run_loss(op, c, in);
    } catch (const ShapeError& e) {
      return e.what();
    }
    return "no ShapeError";
  };
  const std::string nll = "NegativeLogLikelihoodLoss", sce = "SoftmaxCrossEntropyLoss";
  EXPECT_NE(error_of(nll, Case{}, {scores, random_labels({3, 3}, 4, 13)}).find("(" + nll + ")"), std::string::npos);
  EXPECT_NE(error_of(nll, Case{}, {scores, random_labels({3}, 4, 13)}).find("labels"), std::string::npos);
  EXPECT_NE(error_of(nll, Case{}, {scores, labels, random_tensor({5}, 1)}).find("weights"), std::string::npos);
  EXPECT_NE(error_of(sce, Case{"avg"}, {scores, labels}).find("reduction 'avg'"), std::string::npos);
}

}  // namespace
}  // namespace trainrt
