#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::expect_same;

std::vector<Tensor> dropout(const std::vector<Tensor>& inputs, uint64_t seed, int num_outputs = 2,
                            std::map<std::string, Attribute> attrs = {}, int opset = 23) {
  NodeSpec spec{.op = "Dropout", .attrs = std::move(attrs), .num_outputs = num_outputs, .opset = opset,
                .random_seed = seed};
  return run_node(spec, inputs, cpu_kernel_table());
}

Tensor all_true(std::vector<int64_t> dims) {
  Tensor t = Tensor::empty(DType::kBool, std::move(dims));
  std::fill_n(t.data<bool>(), t.numel(), true);
  return t;
}

double kept_fraction(const Tensor& mask) {
  int64_t kept = 0;
  for (int64_t i = 0; i < mask.numel(); ++i) kept += mask.data<bool>()[i];
  return static_cast<double>(kept) / static_cast<double>(mask.numel());
}

TEST(DropoutKernel, InferenceModeIsIdentityWithAllTrueMask) {
  Tensor x = testing::random_tensor({3, 4, 5}, 1);
  // test_dropout_default(_mask)(_ratio): no training_mode input means inference.
  std::vector<Tensor> out = dropout({x}, 5);
  expect_same(out[0], x);
  expect_same(out[1], all_true({3, 4, 5}));
  out = dropout({x, Tensor::scalar<float>(0.1f)}, 5);
  expect_same(out[0], x);
  out = dropout({x, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(false)}, 5);
  expect_same(out[0], x);
  expect_same(out[1], all_true({3, 4, 5}));
  // test_training_dropout_zero_ratio(_mask): training with ratio 0 keeps everything.
  out = dropout({x, Tensor::scalar<float>(0.f), Tensor::scalar<bool>(true)}, 5);
  expect_same(out[0], x);
  expect_same(out[1], all_true({3, 4, 5}));
}

TEST(DropoutKernel, OldOpsetsAreIdentity) {
  Tensor x = testing::make_tensor<float>({3}, {-1, 0, 1});
  expect_same(dropout({x}, 1, 1, {}, 11)[0], x);  // test_dropout_default_old
  Tensor r = testing::random_tensor({3, 4, 5}, 2);
  expect_same(dropout({r}, 1, 1, {{"ratio", Attribute::of_float(0.2f)}}, 11)[0], r);  // ..._random_old
  // Dropout-7 to 9 return the mask in the data type.
  std::vector<Tensor> out = dropout({x}, 1, 2, {}, 7);
  expect_same(out[1], testing::make_tensor<float>({3}, {1, 1, 1}));
  // Dropout-6 trains unless is_test is set; only its test mode is supported.
  expect_same(dropout({x}, 1, 1, {{"is_test", Attribute::of_int(1)}}, 6)[0], x);
  EXPECT_THROW(dropout({x}, 1, 1, {}, 6), UnsupportedOp);
}

TEST(DropoutKernel, TrainingScalesKeptElementsAndZerosTheRest) {
  for (float ratio : {0.1f, 0.5f, 0.75f}) {
    Tensor x = testing::random_tensor({64, 1000}, 3, 0.5f, 1.5f);
    std::vector<Tensor> out = dropout({x, Tensor::scalar<float>(ratio), Tensor::scalar<bool>(true)}, 42);
    const Tensor &y = out[0], &mask = out[1];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float want = mask.data<bool>()[i] ? x.data<float>()[i] / (1.f - ratio) : 0.f;
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6f * std::abs(want)) << "element " << i;
    }
    // 64000 Bernoulli draws: the kept fraction is within ~5 standard deviations of 1 - ratio.
    EXPECT_NEAR(kept_fraction(mask), 1.0 - ratio, 0.01) << "ratio " << ratio;
  }
}

TEST(DropoutKernel, SameSeedSameMaskOtherSeedOtherMask) {
  Tensor x = testing::random_tensor({100, 300}, 4);
  const std::vector<Tensor> in{x, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(true)};
  std::vector<Tensor> a = dropout(in, 7), b = dropout(in, 7), c = dropout(in, 8);
  expect_same(a[0], b[0]);
  expect_same(a[1], b[1]);
  int64_t differ = 0;
  for (int64_t i = 0; i < x.numel(); ++i) differ += a[1].data<bool>()[i] != c[1].data<bool>()[i];
  EXPECT_GT(differ, x.numel() / 3);  // independent masks differ in about half the elements
  // The seed attribute overrides the per-run seed.
  std::map<std::string, Attribute> seeded{{"seed", Attribute::of_int(0)}};
  expect_same(dropout(in, 7, 2, seeded)[1], dropout(in, 8, 2, seeded)[1]);
}

TEST(DropoutKernel, MaskDoesNotDependOnThreadCountOrBlockBoundaries) {
  Tensor x = testing::random_tensor({40001}, 5);
  Graph g;  // imports no opset: the newest rules apply, so training mode exists
  Value* xv = g.add_input("x", DType::kF32, Shape({40001}));
  Value* rv = g.add_input("r", DType::kF32, Shape());
  Value* tv = g.add_input("t", DType::kBool, Shape());
  Node* node = g.add_node("Dropout", {xv, rv, tv}, {"y", "mask"});
  KernelFn kernel = cpu_kernel_table().create(*node);
  Tensor ratio = Tensor::scalar<float>(0.3f), training = Tensor::scalar<bool>(true);
  const auto run = [&](ThreadPool& pool) {
    Tensor y = Tensor::empty(DType::kF32, {40001}), mask = Tensor::empty(DType::kBool, {40001});
    std::vector<const Tensor*> ins{&x, &ratio, &training};
    std::vector<Tensor*> outs{&y, &mask};
    KernelContext ctx{.inputs = ins, .outputs = outs, .pool = &pool, .random_seed = 99};
    kernel(ctx);
    return mask;
  };
  ThreadPool one(1), three(3);
  expect_same(run(one), run(three));
  // A prefix of a tensor draws the same mask as the prefix of a longer one.
  Tensor short_x = testing::random_tensor({777}, 6);
  std::vector<Tensor> s = dropout({short_x, ratio, training}, 99);
  Tensor long_mask = run(three);
  for (int64_t i = 0; i < 777; ++i) ASSERT_EQ(s[1].data<bool>()[i], long_mask.data<bool>()[i]) << i;
}

TEST(DropoutKernel, HalfTypesRatioOneEmptyAndErrors) {
  Tensor x = testing::random_tensor({2000}, 7);
  Tensor xh = Tensor::empty(DType::kBF16, {2000});
  for (int64_t i = 0; i < 2000; ++i) xh.data<BFloat16>()[i] = BFloat16{f32_to_bf16(x.data<float>()[i])};
  const std::vector<Tensor> in{xh, Tensor::scalar<double>(0.25), Tensor::scalar<bool>(true)};
  std::vector<Tensor> out = dropout(in, 3);
  for (int64_t i = 0; i < 2000; ++i) {
    const double want = out[1].data<bool>()[i] ? xh.to_double(i) / 0.75 : 0.0;
    ASSERT_NEAR(out[0].to_double(i), want, 1e-2 * std::abs(want)) << i;
  }
  // ratio 1 drops everything.
  std::vector<Tensor> all = dropout({x, Tensor::scalar<float>(1.f), Tensor::scalar<bool>(true)}, 3);
  expect_close(all[0], Tensor::zeros(DType::kF32, {2000}));
  std::vector<Tensor> none = dropout({Tensor::empty(DType::kF32, {0, 3}), in[1], in[2]}, 3);
  EXPECT_EQ(none[1].dims(), (std::vector<int64_t>{0, 3}));
  EXPECT_THROW(dropout({x, Tensor::scalar<float>(1.5f), Tensor::scalar<bool>(true)}, 3), InvalidModel);
  EXPECT_THROW(dropout({Tensor::from_i64({1, 2})}, 3), ShapeError);
}

}  // namespace
}  // namespace trainrt
