// The bf16 kernels of the ops a bf16 step runs after its products give exactly what their f32
// twins give on the widened inputs, rounded once to nearest even (they widen, run the f32 math
// and round once), so the comparison is bit for bit. Inputs mix ordinary values with the edge
// cases of the conversions: +-0, +-inf, NaN, bf16 denormals, and a value at a rounding tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

// Random bf16 values in [-4, 4), every 37th element an edge case.
Tensor random_bf16(std::vector<int64_t> dims, uint32_t seed) {
  const float edges[] = {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), 1e-39f, -3e-40f, 1.00390625f};
  Tensor t = Tensor::empty(DType::kBF16, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  BFloat16* p = t.data<BFloat16>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = BFloat16{f32_to_bf16(i % 37 == 5 ? edges[(i / 37) % 8] : u(rng))};
  return t;
}

Tensor widened(const Tensor& x) {
  Tensor y = Tensor::empty(DType::kF32, x.dims());
  convert_to_f32(x.data<BFloat16>(), y.data<float>(), x.numel());
  return y;
}

// Runs the node on bf16 inputs and on their widened f32 copies (other inputs, such as a bool
// condition or mask, as given) and expects output 0 of the first to be the second's, rounded: the
// same bits, or NaN in both.
void expect_rounded_f32(const NodeSpec& spec, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(t.dtype() == DType::kBF16 ? widened(t) : t);
  const Tensor got = run_node(spec, inputs, cpu_kernel_table())[0];
  const Tensor want_f32 = run_node(spec, wide, cpu_kernel_table())[0];
  ASSERT_EQ(got.dtype(), DType::kBF16) << spec.op;
  ASSERT_EQ(got.dims(), want_f32.dims()) << spec.op;
  Tensor want = Tensor::empty(DType::kBF16, want_f32.dims());
  convert_from_f32(want_f32.data<float>(), want.data<BFloat16>(), want.numel());
  int mismatches = 0;
  for (int64_t i = 0; i < got.numel() && mismatches < 5; ++i) {
    const uint16_t g = got.data<BFloat16>()[i].bits, w = want.data<BFloat16>()[i].bits;
    const bool both_nan = bf16_to_f32(g) != bf16_to_f32(g) && bf16_to_f32(w) != bf16_to_f32(w);
    if (g != w && !both_nan) {  // a NaN's sign and payload are not specified (ONNX, IEEE 754 6.2.3)
      ++mismatches;
      ADD_FAILURE() << spec.op << " element " << i << ": bf16 kernel gives 0x" << std::hex << g
                    << ", f32 kernel rounded gives 0x" << w;
    }
  }
}

NodeSpec onnx(const std::string& op, std::map<std::string, Attribute> attrs = {}) {
  return {.op = op, .attrs = std::move(attrs)};
}
NodeSpec trainrt_op(const std::string& op, std::map<std::string, Attribute> attrs = {}) {
  return {.op = op, .attrs = std::move(attrs), .domain = std::string(kTrainrtDomain)};
}

// 3 * 5 * 67 elements: 67 is no multiple of a vector, so every loop runs its tail.
const std::vector<int64_t> kDims{3, 5, 67};

TEST(Bf16Kernels, UnaryOpsEqualRoundedF32) {
  const Tensor x = random_bf16(kDims, 1);
  for (const char* approximate : {"none", "tanh"})
    expect_rounded_f32(onnx("Gelu", {{"approximate", Attribute::of_string(approximate)}}), {x});
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Sqrt", "Erf"}) expect_rounded_f32(onnx(op), {x});
}

TEST(Bf16Kernels, GradOpsEqualRoundedF32) {
  const Tensor dy = random_bf16(kDims, 2), v = random_bf16(kDims, 3);
  for (const char* approximate : {"none", "tanh"})
    expect_rounded_f32(trainrt_op("GeluGrad", {{"approximate", Attribute::of_string(approximate)}}), {dy, v});
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad"}) expect_rounded_f32(trainrt_op(op), {dy, v});
}

// Each broadcast form of the drivers (same dims, scalar, row, column, general) from either side.
TEST(Bf16Kernels, BinaryOpsEqualRoundedF32InEveryBroadcast) {
  const Tensor a = random_bf16(kDims, 4);
  const std::vector<std::vector<int64_t>> others{kDims, {1}, {67}, {3, 5, 1}, {3, 1, 67}};
  uint32_t seed = 5;
  for (const std::vector<int64_t>& dims : others) {
    const Tensor b = random_bf16(dims, seed++);
    for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
      SCOPED_TRACE(op + std::string(" with b of ") + to_string(dims));
      expect_rounded_f32(onnx(op), {a, b});
      expect_rounded_f32(onnx(op), {b, a});
    }
  }
}

// Label sparsity's scatter of a bf16 head's rows, and an embedding's: repeated rows summed in f32,
// with and without an addend, rounded once.
TEST(Bf16Kernels, GatherGradEqualsRoundedF32) {
  const Tensor indices = testing::make_tensor<int64_t>({6}, {4, 0, 4, 2, -1, 4});
  const Tensor dy = random_bf16({6, 67}, 11), addend = random_bf16({5, 67}, 12);
  const Tensor shape = Tensor::from_i64({5, 67});
  expect_rounded_f32(trainrt_op("GatherGrad"), {shape, indices, dy});
  expect_rounded_f32(trainrt_op("GatherGrad"), {shape, indices, dy, addend});
  expect_rounded_f32(trainrt_op("GatherGrad", {{"padding_idx", Attribute::of_int(4)}}), {shape, indices, dy});
}

TEST(Bf16Kernels, WhereAndCastEqualRoundedF32) {
  const Tensor x = random_bf16(kDims, 9), y = random_bf16(kDims, 10);
  Tensor cond = Tensor::empty(DType::kBool, kDims);
  for (int64_t i = 0; i < cond.numel(); ++i) cond.data<bool>()[i] = (i * 7) % 3 == 0;
  expect_rounded_f32(onnx("Where"), {cond, x, y});
  // bf16 -> f32 -> bf16 gives every value back (NaN as a quiet NaN).
  const Tensor wide = run_node("Cast", {x}, {{"to", Attribute::of_int(1)}})[0];
  const Tensor back = run_node("Cast", {wide}, {{"to", Attribute::of_int(16)}})[0];
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint16_t bits = x.data<BFloat16>()[i].bits;
    EXPECT_EQ(std::bit_cast<uint32_t>(wide.data<float>()[i]), uint32_t{bits} << 16) << i;
    const bool nan = (bits & 0x7fff) > 0x7f80;
    if (nan) EXPECT_GT(back.data<BFloat16>()[i].bits & 0x7fff, 0x7f80) << i;  // still NaN
    else EXPECT_EQ(back.data<BFloat16>()[i].bits, bits) << i;
  }
}

TEST(Bf16Kernels, DropoutAndGradEqualRoundedF32) {
  const Tensor x = random_bf16(kDims, 11);
  Tensor ratio = Tensor::empty(DType::kF32, {});
  ratio.data<float>()[0] = 0.25f;
  Tensor training = Tensor::empty(DType::kBool, {});
  training.data<bool>()[0] = true;
  NodeSpec dropout = onnx("Dropout");
  dropout.num_outputs = 2;
  dropout.random_seed = 42;
  expect_rounded_f32(dropout, {x, ratio, training});
  const Tensor mask = run_node(dropout, {x, ratio, training}, cpu_kernel_table())[1];
  expect_rounded_f32(trainrt_op("DropoutGrad"), {x, mask, ratio, training});
}

// The bias gradient (leading axes summed) and a middle axis summed: f32 sums, rounded once.
TEST(Bf16Kernels, ReduceSumToShapeEqualsRoundedF32) {
  const Tensor x = random_bf16(kDims, 14);
  for (const std::vector<int64_t>& to : {std::vector<int64_t>{67}, std::vector<int64_t>{3, 1, 67}}) {
    Tensor shape = Tensor::empty(DType::kI64, {static_cast<int64_t>(to.size())});
    std::copy(to.begin(), to.end(), shape.data<int64_t>());
    expect_rounded_f32(trainrt_op("ReduceSumToShape"), {x, shape});
  }
}

// Along the last axis (rows read in place) and along a middle one (column blocks): rows of 67 and
// 2500 elements, the second longer than a summation block (2048) of reduce_math.cc.
TEST(Bf16Kernels, SoftmaxAndGradEqualRoundedF32) {
  for (const std::vector<int64_t>& dims : {kDims, std::vector<int64_t>{2, 2500}}) {
    const Tensor x = random_bf16(dims, 12), dy = random_bf16(dims, 13);
    for (int64_t axis : {int64_t{-1}, int64_t{1}}) {
      SCOPED_TRACE("dims " + to_string(dims) + ", axis " + std::to_string(axis));
      for (const char* op : {"Softmax", "LogSoftmax"}) {
        expect_rounded_f32(onnx(op, {{"axis", Attribute::of_int(axis)}}), {x});
        const Tensor y = run_node(onnx(op, {{"axis", Attribute::of_int(axis)}}), {x}, cpu_kernel_table())[0];
        expect_rounded_f32(trainrt_op(std::string(op) + "Grad", {{"axis", Attribute::of_int(axis)}}), {dy, y});
      }
    }
  }
}

}  // namespace
}  // namespace trainrt
