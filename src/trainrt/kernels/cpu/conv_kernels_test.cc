// Conv and ConvGrad kernels (oneDNN) against a naive double-precision loop convolution, over 1-D,
// 2-D and 3-D problems with strides, explicit and automatic padding, dilations, groups (depthwise
// included), odd sizes, batch 1 and batches that split into uneven chunks, in f32 and in bf16 (sums
// in f32); and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/conv_primitives.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_values;
using testing::make_tensor;
using testing::random_tensor;

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

struct ConvCase {
  std::string name;
  std::vector<int64_t> x, w;  // (N, C, D...), (M, C / group, K...)
  std::map<std::string, Attribute> attrs;
  bool bias = true;
  // What the reference uses, worked out by hand for the case (not from the code under test).
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pad_begin;
  std::vector<int64_t> y;  // expected output dims
};

// Index arithmetic of a (N, C, D0, D1, D2) tensor whose 1-D or 2-D spatial dims are padded with
// leading 1s, so one loop nest serves every rank.
struct Dims5 {
  int64_t n, c, d[3];
  explicit Dims5(const std::vector<int64_t>& dims) : n(dims[0]), c(dims[1]), d{1, 1, 1} {
    const size_t k = dims.size() - 2;
    for (size_t i = 0; i < k; ++i) d[3 - k + i] = dims[i + 2];
  }
  int64_t at(int64_t i0, int64_t i1, const int64_t* s) const { return (((i0 * c + i1) * d[0] + s[0]) * d[1] + s[1]) * d[2] + s[2]; }
};

std::vector<int64_t> padded3(const std::vector<int64_t>& v, int64_t fill) {
  std::vector<int64_t> out(3 - v.size(), fill);
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y = conv(x, w) + b and, for the given dy, the gradients of sum(y * dy): one loop nest visits
// every (output element, kernel tap) pair once and accumulates all four.
Reference reference(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy) {
  const Dims5 xd(c.x), wd(c.w), yd(c.y);
  const std::vector<int64_t> s = padded3(c.strides, 1), dil = padded3(c.dilations, 1), pb = padded3(c.pad_begin, 0);
  const int64_t m_per_group = wd.n / c.group;
  Reference r;
  r.y.assign(static_cast<size_t>(yd.n * yd.c * yd.d[0] * yd.d[1] * yd.d[2]), 0.0);
  r.dx.assign(static_cast<size_t>(x.numel()), 0.0);
  r.dw.assign(static_cast<size_t>(w.numel()), 0.0);
  r.db.assign(static_cast<size_t>(wd.n), 0.0);
  int64_t o[3], k[3], i[3];
  for (int64_t n = 0; n < yd.n; ++n)
    for (int64_t m = 0; m < yd.c; ++m)
      for (o[0] = 0; o[0] < yd.d[0]; ++o[0])
        for (o[1] = 0; o[1] < yd.d[1]; ++o[1])
          for (o[2] = 0; o[2] < yd.d[2]; ++o[2]) {
            const int64_t yi = yd.at(n, m, o);
            const double g = dy.to_double(yi);
            double acc = b.defined() ? b.to_double(m) : 0.0;
            r.db[static_cast<size_t>(m)] += g;
            for (int64_t cw = 0; cw < wd.c; ++cw)
              for (k[0] = 0; k[0] < wd.d[0]; ++k[0])
                for (k[1] = 0; k[1] < wd.d[1]; ++k[1])
                  for (k[2] = 0; k[2] < wd.d[2]; ++k[2]) {
                    bool inside = true;
                    for (int a = 0; a < 3; ++a) {
                      i[a] = o[a] * s[a] - pb[a] + k[a] * dil[a];
                      inside = inside && i[a] >= 0 && i[a] < xd.d[a];
                    }
                    if (!inside) continue;
                    const int64_t xi = xd.at(n, (m / m_per_group) * wd.c + cw, i), wi = wd.at(m, cw, k);
                    acc += x.to_double(xi) * w.to_double(wi);
                    r.dx[static_cast<size_t>(xi)] += g * w.to_double(wi);
                    r.dw[static_cast<size_t>(wi)] += g * x.to_double(xi);
                  }
            r.y[static_cast<size_t>(yi)] = acc;
          }
  return r;
}

std::vector<ConvCase> cases() {
  std::vector<ConvCase> v;
  // 2-D
  v.push_back({"3x3 pad 1", {2, 3, 8, 8}, {4, 3, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}, true, 1, {1, 1}, {1, 1}, {1, 1},
               {2, 4, 8, 8}});
  v.push_back({"stride 2, asymmetric pads, odd sizes", {2, 3, 7, 9}, {5, 3, 3, 2},
               {{"strides", ints({2, 2})}, {"pads", ints({0, 1, 2, 1})}}, false, 1, {2, 2}, {1, 1}, {0, 1}, {2, 5, 4, 5}});
  v.push_back({"dilation 2", {1, 2, 9, 8}, {3, 2, 3, 3}, {{"dilations", ints({2, 2})}, {"pads", ints({2, 1, 2, 1})}},
               true, 1, {1, 1}, {2, 2}, {2, 1}, {1, 3, 9, 6}});
  v.push_back({"group 2, kernel_shape", {2, 4, 6, 7}, {6, 2, 3, 2},
               {{"group", Attribute::of_int(2)}, {"kernel_shape", ints({3, 2})}}, true, 2, {1, 1}, {1, 1}, {0, 0},
               {2, 6, 4, 6}});
  v.push_back({"depthwise, multiplier 2, stride 2", {2, 5, 8, 8}, {10, 1, 3, 3},
               {{"group", Attribute::of_int(5)}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, true, 5,
               {2, 2}, {1, 1}, {1, 1}, {2, 10, 4, 4}});
  v.push_back({"batch 1, 1x1", {1, 1, 5, 3}, {1, 1, 1, 1}, {}, true, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1, 5, 3}});
  v.push_back({"batch 9: uneven chunks", {9, 3, 17, 17}, {4, 3, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}, true, 1,
               {1, 1}, {1, 1}, {1, 1}, {9, 4, 17, 17}});
  v.push_back({"batch 23, 4x4 map: chunks of 16 and 7", {23, 8, 4, 4}, {6, 8, 3, 3}, {{"pads", ints({1, 1, 1, 1})}},
               true, 1, {1, 1}, {1, 1}, {1, 1}, {23, 6, 4, 4}});
  // 16+ channels: oneDNN's blocked layouts, W reordered once for both chunk sizes (8 and 5 with
  // 2 threads).
  v.push_back({"32 -> 48 channels, blocked layouts, batch 21", {21, 32, 6, 6}, {48, 32, 3, 3},
               {{"pads", ints({1, 1, 1, 1})}}, true, 1, {1, 1}, {1, 1}, {1, 1}, {21, 48, 6, 6}});
  // auto_pad: in 7, k 4, s 2 -> out 4, total pad 3 (UPPER 1 + 2, LOWER 2 + 1); in 8, k 3 -> out 4, total 1
  v.push_back({"SAME_UPPER", {2, 2, 7, 8}, {3, 2, 4, 3},
               {{"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2, 2})}}, true, 1, {2, 2}, {1, 1},
               {1, 0}, {2, 3, 4, 4}});
  v.push_back({"SAME_LOWER", {2, 2, 7, 8}, {3, 2, 4, 3},
               {{"auto_pad", Attribute::of_string("SAME_LOWER")}, {"strides", ints({2, 2})}}, true, 1, {2, 2}, {1, 1},
               {2, 1}, {2, 3, 4, 4}});
  v.push_back({"VALID", {2, 2, 7, 8}, {3, 2, 4, 3},
               {{"auto_pad", Attribute::of_string("VALID")}, {"strides", ints({2, 2})}}, false, 1, {2, 2}, {1, 1},
               {0, 0}, {2, 3, 2, 3}});
  // 1-D and 3-D
  v.push_back({"1-D stride 2 pad 1", {3, 2, 11}, {4, 2, 3}, {{"strides", ints({2})}, {"pads", ints({1, 1})}}, true, 1,
               {2}, {1}, {1}, {3, 4, 6}});
  v.push_back({"1-D dilation 3, group 2", {2, 4, 13}, {2, 2, 3}, {{"dilations", ints({3})}, {"group", Attribute::of_int(2)}},
               false, 2, {1}, {3}, {0}, {2, 2, 7}});
  v.push_back({"3-D", {2, 2, 5, 6, 4}, {3, 2, 3, 2, 3},
               {{"strides", ints({1, 2, 1})}, {"pads", ints({1, 0, 1, 1, 1, 1})}, {"dilations", ints({1, 1, 2})}}, true,
               1, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {2, 3, 5, 3, 2}});
  return v;
}

TEST(ConvKernels, ForwardMatchesLoopReference) {
  uint32_t seed = 1;
  for (const ConvCase& c : cases()) {
    const Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++), b = random_tensor({c.w[0]}, seed++);
    const Tensor dy = random_tensor(c.y, seed++);
    const std::vector<Tensor> y = run_node("Conv", {x, w, c.bias ? b : Tensor()}, c.attrs);
    ASSERT_EQ(y[0].dims(), c.y) << c.name;
    expect_values(y[0], reference(c, x, w, c.bias ? b : Tensor(), dy).y, 1e-4, 1e-5, c.name);
  }
}

TEST(ConvKernels, GradientsMatchLoopReference) {
  uint32_t seed = 100;
  for (const ConvCase& c : cases()) {
    const Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++), dy = random_tensor(c.y, seed++);
    const Reference r = reference(c, x, w, Tensor(), dy);
    NodeSpec spec{.op = "ConvGrad", .attrs = c.attrs, .num_outputs = 3, .domain = std::string(kTrainrtDomain)};
    const std::vector<Tensor> g = run_node(spec, {dy, x, w}, cpu_kernel_table());
    ASSERT_EQ(g[0].dims(), c.x) << c.name;
    ASSERT_EQ(g[1].dims(), c.w) << c.name;
    ASSERT_EQ(g[2].dims(), std::vector<int64_t>{c.w[0]}) << c.name;
    expect_values(g[0], r.dx, 1e-4, 1e-5, c.name + " dX");
    expect_values(g[1], r.dw, 1e-4, 1e-4, c.name + " dW");
    expect_values(g[2], r.db, 1e-4, 1e-4, c.name + " dB");
    // dX alone (a frozen weight, no bias): the same values.
    spec.num_outputs = 1;
    expect_values(run_node(spec, {dy, x, w}, cpu_kernel_table())[0], r.dx, 1e-4, 1e-5, c.name + " dX alone");
  }
}

TEST(ConvKernels, ChangingBatchSizesMatchReference) {
  // Batch sizes coming back after others (1 and 6 chunk differently from 3), as with a dynamic
  // batch: cached primitives are looked up by chunk problem, never reused for another one.
  const ConvCase c = cases()[0];
  const Tensor w = random_tensor(c.w, 7), b = random_tensor({c.w[0]}, 8);
  for (int64_t n : {3, 1, 3, 6}) {
    ConvCase cn = c;
    cn.x[0] = cn.y[0] = n;
    const Tensor x = random_tensor(cn.x, static_cast<uint32_t>(n));
    const std::vector<Tensor> y = run_node("Conv", {x, w, b}, c.attrs);
    expect_values(y[0], reference(cn, x, w, b, Tensor::zeros(DType::kF32, cn.y)).y, 1e-4, 1e-5, fmt("batch ", n));
  }
}

TEST(ConvKernels, BatchChunksBalanceThreadsAndKeepSmallMapsTogether) {
  // Up to 4 chunks per thread on large maps; at least kMinChunkOutputs output positions per chunk.
  EXPECT_EQ(batch_chunks(64, 2, 32 * 32).size, 8);
  EXPECT_EQ(batch_chunks(64, 2, 32 * 32).count, 8);
  EXPECT_EQ(batch_chunks(64, 2, 4 * 4).size, 16);
  EXPECT_EQ(batch_chunks(64, 2, 4 * 4).count, 4);
  EXPECT_EQ(batch_chunks(23, 2, 4 * 4).size, 16);
  EXPECT_EQ(batch_chunks(23, 2, 4 * 4).count, 2);  // 16 + 7
  EXPECT_EQ(batch_chunks(9, 2, 1).size, 9);  // the whole batch, never more than it
  EXPECT_EQ(batch_chunks(9, 2, 1).count, 1);
  EXPECT_EQ(batch_chunks(1, 2, 1).count, 1);
  EXPECT_EQ(batch_chunks(2, 2, 257).count, 2);  // Bf16SumsInF32 relies on one chunk per image
}

std::string error_of(const std::vector<Tensor>& inputs, const std::map<std::string, Attribute>& attrs = {}) {
  try {
    run_node("Conv", inputs, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ConvKernels, BadInputsAreTypedErrorsNamingTheProblem) {
  const Tensor x = random_tensor({2, 4, 5, 5}, 1);
  EXPECT_NE(error_of({x, random_tensor({3, 3, 3, 3}, 2)}).find("has 4 channels"), std::string::npos);
  EXPECT_NE(error_of({x, random_tensor({3, 2, 3, 3}, 2)}, {{"group", Attribute::of_int(2)}}).find("not a multiple of group 2"),
            std::string::npos);
  EXPECT_NE(error_of({x, random_tensor({3, 4, 3}, 2)}).find("expected rank 4"), std::string::npos);
  EXPECT_NE(error_of({x, random_tensor({3, 4, 7, 3}, 2)}).find("smaller than the dilated kernel"), std::string::npos);
  EXPECT_NE(error_of({x, random_tensor({3, 4, 3, 3}, 2), random_tensor({4}, 3)}).find("input 2 (B)"), std::string::npos);
  Tensor x64 = Tensor::zeros(DType::kF64, {1, 1, 3, 3}), w64 = Tensor::zeros(DType::kF64, {1, 1, 1, 1});
  EXPECT_THROW(run_node("Conv", {x64, w64}), UnsupportedOp);
  EXPECT_NE(error_of({x64, w64}).find("f32 and bf16 only, got dtype f64"), std::string::npos) << error_of({x64, w64});
}

// bf16: the reference runs on the bf16 inputs' exact values in double, so the only errors left are
// the single rounding of each output to bf16 (2^-9 relative) and the f32 sums (tiny next to it).
// Allowed: 2^-8 relative, and 1e-4 of the tensor's largest value where a sum cancels to near 0.

Tensor rounded_to_bf16(const Tensor& f32) {
  Tensor t = Tensor::zeros(DType::kBF16, f32.dims());
  convert_from_f32(f32.data<float>(), t.data<BFloat16>(), f32.numel());
  return t;
}

Tensor bf16_full(std::vector<int64_t> dims, float value) {
  Tensor t = Tensor::zeros(DType::kBF16, std::move(dims));
  std::fill_n(t.data<BFloat16>(), t.numel(), BFloat16{f32_to_bf16(value)});
  return t;
}

void expect_bf16_values(const Tensor& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), DType::kBF16) << what;
  double scale = 0;
  for (double v : expected) scale = std::max(scale, std::abs(v));
  expect_values(actual, expected, 1.0 / 256, 1e-4 * scale, what);
}

TEST(ConvKernels, Bf16ForwardMatchesLoopReference) {
  uint32_t seed = 200;
  for (const ConvCase& c : cases()) {
    const Tensor x = rounded_to_bf16(random_tensor(c.x, seed++)), w = rounded_to_bf16(random_tensor(c.w, seed++));
    const Tensor b = c.bias ? rounded_to_bf16(random_tensor({c.w[0]}, seed++)) : Tensor();
    const std::vector<Tensor> y = run_node("Conv", {x, w, b}, c.attrs);
    ASSERT_EQ(y[0].dims(), c.y) << c.name;
    expect_bf16_values(y[0], reference(c, x, w, b, Tensor::zeros(DType::kF32, c.y)).y, c.name);
  }
}

TEST(ConvKernels, Bf16GradientsMatchLoopReference) {
  uint32_t seed = 300;
  for (const ConvCase& c : cases()) {
    const Tensor x = rounded_to_bf16(random_tensor(c.x, seed++)), w = rounded_to_bf16(random_tensor(c.w, seed++));
    const Tensor dy = rounded_to_bf16(random_tensor(c.y, seed++));
    const Reference r = reference(c, x, w, Tensor(), dy);
    NodeSpec spec{.op = "ConvGrad", .attrs = c.attrs, .num_outputs = 3, .domain = std::string(kTrainrtDomain)};
    const std::vector<Tensor> g = run_node(spec, {dy, x, w}, cpu_kernel_table());
    expect_bf16_values(g[0], r.dx, c.name + " dX");
    expect_bf16_values(g[1], r.dw, c.name + " dW");
    expect_bf16_values(g[2], r.db, c.name + " dB");
  }
}

// Sums that bf16 accumulation would get wrong (with 8 significant bits, 256 + 1 rounds back to 256).
TEST(ConvKernels, Bf16SumsInF32) {
  // Forward: 1x1 conv over 1024 input channels of ones. Backward-data: 1024 output channels.
  const Tensor ones_x = bf16_full({1, 1024, 2, 2}, 1.f);
  const Tensor ones_w = bf16_full({1, 1024, 1, 1}, 1.f);
  const Tensor y = run_node("Conv", {ones_x, ones_w})[0];
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.to_double(i), 1024.0) << "Y element " << i;
  const Tensor dy = bf16_full({1, 1024, 2, 2}, 1.f);
  const Tensor w_out = bf16_full({1024, 1, 1, 1}, 1.f);
  NodeSpec dx_only{.op = "ConvGrad", .num_outputs = 1, .domain = std::string(kTrainrtDomain)};
  const Tensor dx = run_node(dx_only, {dy, bf16_full({1, 1, 2, 2}, 1.f), w_out},
                             cpu_kernel_table())[0];
  for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.to_double(i), 1024.0) << "dX element " << i;
  // Backward-weights over a batch of 2, one chunk per image (batch_chunks): X all ones (2, 1, 257);
  // dY ones over image 0 (partial sum 257, not a bf16 value) and a single -1 in image 1. dW = dB =
  // 257 - 1 = 256; rounding each chunk's partial sum to bf16 first would give 256 - 1 = 255.
  std::vector<float> g(2 * 257, 0.f);
  std::fill_n(g.begin(), 257, 1.f);
  g[257] = -1.f;
  const Tensor dy2 = rounded_to_bf16(make_tensor<float>({2, 1, 257}, g));
  const Tensor x2 = bf16_full({2, 1, 257}, 1.f);
  const Tensor w2 = bf16_full({1, 1, 1}, 1.f);
  NodeSpec all{.op = "ConvGrad", .num_outputs = 3, .domain = std::string(kTrainrtDomain)};
  const std::vector<Tensor> grads = run_node(all, {dy2, x2, w2}, cpu_kernel_table());
  EXPECT_EQ(grads[1].to_double(0), 256.0) << "dW";
  EXPECT_EQ(grads[2].to_double(0), 256.0) << "dB";
}

TEST(ConvKernels, Bf16MixedWithF32IsATypedError) {
  const Tensor x = rounded_to_bf16(random_tensor({1, 2, 4, 4}, 1)), w = random_tensor({3, 2, 3, 3}, 2);
  EXPECT_THROW(run_node("Conv", {x, w}), ShapeError);
  EXPECT_NE(error_of({x, w}).find("input 1 (W)"), std::string::npos) << error_of({x, w});
  const Tensor b = random_tensor({3}, 3);
  EXPECT_NE(error_of({x, rounded_to_bf16(w), b}).find("input 2 (B)"), std::string::npos);
}

}  // namespace
}  // namespace trainrt
