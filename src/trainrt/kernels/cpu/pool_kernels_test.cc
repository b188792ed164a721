// Pooling kernels (MaxPool, AveragePool, the global pools and their gradient ops) against a
// direct double-precision reference that tests every tap of every window for padding.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "trainrt/core/dtype_convert.h"
#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::expect_values;
using testing::make_tensor;
using testing::random_tensor;

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

// One pooling case: explicit pads (begin..., end...), written out for the reference.
struct Case {
  std::vector<int64_t> x, kernel, strides, dilations, pads;
  bool ceil = false;
  bool include_pad = false;
};

std::map<std::string, Attribute> attrs_of(const Case& c) {
  std::map<std::string, Attribute> a{{"kernel_shape", ints(c.kernel)}, {"strides", ints(c.strides)},
                                     {"dilations", ints(c.dilations)}, {"pads", ints(c.pads)},
                                     {"ceil_mode", Attribute::of_int(c.ceil)}};
  return a;
}

// Output extent of one dim, the formula of PyTorch's pooling_output_shape.
int64_t out_extent(const Case& c, size_t i) {
  const size_t k = c.kernel.size();
  const int64_t in = c.x[2 + i], pb = c.pads[i], pe = c.pads[k + i];
  const int64_t span = in + pb + pe - c.dilations[i] * (c.kernel[i] - 1) - 1;
  int64_t o = (c.ceil ? (span + c.strides[i] - 1) / c.strides[i] : span / c.strides[i]) + 1;
  if (c.ceil && (o - 1) * c.strides[i] >= in + pb) --o;
  return o;
}

struct Reference {
  std::vector<int64_t> dims;
  std::vector<double> max, avg;
  std::vector<int64_t> argmax;  // offset within the plane
  std::vector<double> max_grad, avg_grad;  // for dY = the given weights
};

// Walks every output position of every plane with an odometer over the spatial dims.
Reference reference(const Case& c, const Tensor& x, const Tensor* dy) {
  const size_t k = c.kernel.size();
  Reference r;
  r.dims = {c.x[0], c.x[1]};
  int64_t in_plane = 1, out_plane = 1;
  for (size_t i = 0; i < k; ++i) {
    r.dims.push_back(out_extent(c, i));
    in_plane *= c.x[2 + i];
    out_plane *= r.dims.back();
  }
  r.max_grad.assign(static_cast<size_t>(x.numel()), 0.0);
  r.avg_grad.assign(static_cast<size_t>(x.numel()), 0.0);
  for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p) {
    for (int64_t o = 0; o < out_plane; ++o) {
      std::vector<int64_t> pos(k);
      for (int64_t rem = o, i = static_cast<int64_t>(k) - 1; i >= 0; --i) {
        pos[i] = rem % r.dims[2 + i];
        rem /= r.dims[2 + i];
      }
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      int64_t best_at = -1, inside = 0, padded = 0;
      std::vector<int64_t> tap(k, 0);
      std::vector<int64_t> taps_in;
      for (bool more = true; more;) {
        bool in_bounds = true, in_padding = true;
        int64_t offset = 0;
        for (size_t i = 0; i < k; ++i) {
          const int64_t at = pos[i] * c.strides[i] - c.pads[i] + tap[i] * c.dilations[i];
          in_bounds = in_bounds && at >= 0 && at < c.x[2 + i];
          in_padding = in_padding && at < c.x[2 + i] + c.pads[k + i];
          offset = offset * c.x[2 + i] + at;
        }
        if (in_padding) ++padded;
        if (in_bounds) {
          const double v = x.to_double(p * in_plane + offset);
          ++inside;
          sum += v;
          taps_in.push_back(offset);
          if (v > best) best = v, best_at = offset;
        }
        more = false;
        for (int64_t i = static_cast<int64_t>(k) - 1; i >= 0 && !more; --i) {
          if (++tap[i] < c.kernel[i]) more = true;
          else tap[i] = 0;
        }
      }
      const int64_t count = c.include_pad ? padded : inside;
      r.max.push_back(best);
      r.argmax.push_back(best_at);
      r.avg.push_back(sum / static_cast<double>(count));
      if (dy) {
        const double g = dy->to_double(p * out_plane + o);
        r.max_grad[static_cast<size_t>(p * in_plane + best_at)] += g;
        for (int64_t t : taps_in) r.avg_grad[static_cast<size_t>(p * in_plane + t)] += g / static_cast<double>(count);
      }
    }
  }
  return r;
}

std::vector<Case> cases() {
  return {
      {{2, 3, 9}, {3}, {2}, {1}, {1, 1}},                                   // 1-D
      {{2, 2, 7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},                 // ResNet stem shape
      {{1, 2, 7, 8}, {3, 2}, {2, 3}, {1, 1}, {1, 0, 1, 1}, true},           // ceil, asymmetric
      {{1, 2, 7, 8}, {3, 3}, {3, 3}, {1, 1}, {1, 1, 1, 1}, true, true},     // last window on pad
      {{1, 2, 9, 9}, {2, 3}, {1, 2}, {2, 2}, {0, 1, 2, 1}, false, true},    // dilation, include pad
      {{2, 2, 5, 6, 4}, {2, 3, 2}, {2, 2, 1}, {1, 1, 2}, {1, 0, 0, 0, 1, 1}, true},  // 3-D
      // Rows of 17 windows and more (max_pool_rows.h's vector passes, with a remainder):
      {{2, 3, 11, 37}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},               // stem: k 3, s 2, pad 1
      {{1, 2, 6, 34}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},                // CNN stem: k 2, s 2
      {{1, 2, 5, 19}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},          // s 1, ceil
      {{1, 2, 50}, {3}, {3}, {2}, {2, 1}, true},                            // 1-D, s 3, dilation
      {{1, 2, 4, 2}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},                 // a window wider than a row
      // EfficientNet's pooler, AvgPool2d(k, ceil_mode=True) on a smaller map: one window, mostly
      // beyond the input (the general walk, not the row paths' k x k taps)
      {{2, 3, 3, 2}, {15, 16}, {15, 16}, {1, 1}, {0, 0, 0, 0}, true, true},
  };
}

TEST(PoolKernels, MaxAndAverageMatchTheReference) {
  for (const Case& c : cases()) {
    const Tensor x = random_tensor(c.x, 1);
    const Reference r = reference(c, x, nullptr);
    const std::string what = to_string(c.x) + " kernel " + to_string(c.kernel);
    const std::vector<Tensor> mp = run_node("MaxPool", {x}, attrs_of(c), 2);
    EXPECT_EQ(mp[0].dims(), r.dims) << what;
    expect_values(mp[0], r.max, 0, 0, what + " MaxPool");
    std::vector<double> indices;
    const int64_t in_plane = x.numel() / (c.x[0] * c.x[1]), out_plane = mp[0].numel() / (c.x[0] * c.x[1]);
    for (size_t o = 0; o < r.argmax.size(); ++o)
      indices.push_back(static_cast<double>(static_cast<int64_t>(o) / out_plane * in_plane + r.argmax[o]));
    expect_values(mp[1], indices, 0, 0, what + " Indices");
    auto attrs = attrs_of(c);
    attrs["count_include_pad"] = Attribute::of_int(c.include_pad);
    const Tensor ap = run_node("AveragePool", {x}, attrs)[0];
    expect_values(ap, r.avg, 1e-6, 1e-7, what + " AveragePool");
  }
}

TEST(PoolKernels, GradientsRouteAsTheReference) {
  for (const Case& c : cases()) {
    const Tensor x = random_tensor(c.x, 2);
    const Tensor y = run_node("MaxPool", {x}, attrs_of(c))[0];
    const Tensor dy = random_tensor(y.dims(), 3);
    const Reference r = reference(c, x, &dy);
    const std::string what = to_string(c.x) + " kernel " + to_string(c.kernel);
    NodeSpec max_grad{.op = "MaxPoolGrad", .attrs = attrs_of(c), .domain = std::string(kTrainrtDomain)};
    expect_values(run_node(max_grad, {dy, x}, cpu_kernel_table())[0], r.max_grad, 1e-6, 1e-7, what + " MaxPoolGrad");
    NodeSpec avg_grad{.op = "AveragePoolGrad", .attrs = attrs_of(c), .domain = std::string(kTrainrtDomain)};
    avg_grad.attrs["count_include_pad"] = Attribute::of_int(c.include_pad);
    expect_values(run_node(avg_grad, {dy, Tensor::from_i64(c.x)}, cpu_kernel_table())[0], r.avg_grad, 1e-5, 1e-6,
                  what + " AveragePoolGrad");
  }
}

// An f32 tensor's values as f32 or f64.
Tensor in_type(const Tensor& f32, DType t) {
  if (t == DType::kF32) return f32;
  Tensor out = Tensor::empty(DType::kF64, f32.dims());
  for (int64_t i = 0; i < f32.numel(); ++i) out.data<double>()[i] = f32.to_double(i);
  return out;
}

// MaxPoolWithArgmax gives MaxPool's Y and, per window, a tap index (255 where the reference has no
// argmax); MaxPoolArgmaxGrad on it gives MaxPoolGrad's dX bit for bit (the same sums in the same
// order: every window's dY lands on the reference's argmax), on every geometry, in f32
// (vectorized rows) and f64 (window by window).
TEST(PoolKernels, ArgmaxPoolAndItsGradientMatchMaxPoolAndMaxPoolGrad) {
  const std::string trainrt(kTrainrtDomain);
  for (const Case& c : cases()) {
    for (DType t : {DType::kF32, DType::kF64}) {
      const std::string what = to_string(c.x) + " kernel " + to_string(c.kernel) + " " + std::string(dtype_name(t));
      const Tensor x = in_type(random_tensor(c.x, 4), t);
      const Reference r = reference(c, x, nullptr);
      const std::vector<Tensor> pooled =
          run_node(NodeSpec{.op = "MaxPoolWithArgmax", .attrs = attrs_of(c), .num_outputs = 2, .domain = trainrt},
                   {x}, cpu_kernel_table());
      expect_close(pooled[0], run_node("MaxPool", {x}, attrs_of(c))[0], 0, 0);
      ASSERT_EQ(pooled[1].dtype(), DType::kU8) << what;
      // Windows wholly in padding: 255 where the reference has -1.
      for (size_t o = 0; o < r.argmax.size(); ++o)
        if (r.argmax[o] < 0) EXPECT_EQ(pooled[1].data<uint8_t>()[o], 255) << what << " window " << o;
      const Tensor dy = in_type(random_tensor(pooled[0].dims(), 5), t);
      const Tensor want =
          run_node(NodeSpec{.op = "MaxPoolGrad", .attrs = attrs_of(c), .domain = trainrt}, {dy, x}, cpu_kernel_table())[0];
      const Tensor got = run_node(NodeSpec{.op = "MaxPoolArgmaxGrad", .attrs = attrs_of(c), .domain = trainrt},
                                  {dy, pooled[1], Tensor::from_i64(c.x)}, cpu_kernel_table())[0];
      expect_close(got, want, 0, 0);
    }
  }
}

TEST(PoolKernels, ArgmaxGradRejectsAnArgmaxOfAnotherShape) {
  const Tensor dy = random_tensor({1, 1, 2, 2}, 6);
  NodeSpec spec{.op = "MaxPoolArgmaxGrad", .attrs = {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
                .domain = std::string(kTrainrtDomain)};
  const Tensor argmax = make_tensor<uint8_t>({1, 1, 4}, {0, 1, 2, 3});
  try {
    run_node(spec, {dy, argmax, Tensor::from_i64({1, 1, 4, 4})}, cpu_kernel_table());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MaxPoolArgmaxGrad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("input 1 (Argmax)"), std::string::npos) << e.what();
  }
}

TEST(PoolKernels, TiesGoToTheFirstMaximum) {
  // One 2x2 window of equal values: torch routes the whole gradient to the first one.
  const Tensor x = make_tensor<float>({1, 1, 2, 2}, {5, 5, 5, 5});
  const Tensor dy = make_tensor<float>({1, 1, 1, 1}, {3});
  NodeSpec spec{.op = "MaxPoolGrad", .attrs = {{"kernel_shape", ints({2, 2})}}, .domain = std::string(kTrainrtDomain)};
  expect_values(run_node(spec, {dy, x}, cpu_kernel_table())[0], {3, 0, 0, 0}, 0, 0, "tie");
}

TEST(PoolKernels, NanWinsAndTheFirstNanTakesTheGradient) {
  // Windows of 2 (k 2, s 2) over 20 values: (NaN, 5), (5, NaN), (NaN, NaN), then ties of 1.
  std::vector<float> values(40, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  values[0] = nan, values[1] = 5, values[2] = 5, values[3] = nan, values[4] = nan, values[5] = nan;
  const Tensor x = make_tensor<float>({1, 1, 1, 40}, values);
  const std::vector<Tensor> mp = run_node("MaxPool", {x}, {{"kernel_shape", ints({1, 2})}, {"strides", ints({1, 2})}}, 2);
  std::vector<double> y(20, 1.0), indices;
  y[0] = y[1] = y[2] = std::nan("");
  for (int64_t o = 0; o < 20; ++o) indices.push_back(static_cast<double>(2 * o));
  indices[1] = 3;
  expect_values(mp[0], y, 0, 0, "NaN MaxPool");
  expect_values(mp[1], indices, 0, 0, "NaN Indices");
  NodeSpec spec{.op = "MaxPoolGrad",
                .attrs = {{"kernel_shape", ints({1, 2})}, {"strides", ints({1, 2})}},
                .domain = std::string(kTrainrtDomain)};
  std::vector<double> dx(40, 0.0);
  for (double i : indices) dx[static_cast<size_t>(i)] = 1;
  expect_values(run_node(spec, {make_tensor<float>({1, 1, 1, 20}, std::vector<float>(20, 1.f)), x},
                         cpu_kernel_table())[0],
                dx, 0, 0, "NaN MaxPoolGrad");
}

Tensor to_bf16(const Tensor& f32) {
  Tensor t = Tensor::zeros(DType::kBF16, f32.dims());
  convert_from_f32(f32.data<float>(), t.data<BFloat16>(), f32.numel());
  return t;
}
Tensor to_f32(const Tensor& bf16) {
  Tensor t = Tensor::zeros(DType::kF32, bf16.dims());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(bf16.to_double(i));
  return t;
}

// bf16 pools compute in f32 on the exact bf16 values: the f32 kernels on those values, up to the one
// rounding of each output to bf16 (2^-9 relative; maxima and their routing are exact).
TEST(PoolKernels, BFloat16MatchesFloat32) {
  for (const Case& c : cases()) {
    const Tensor x = to_bf16(random_tensor(c.x, 8)), x32 = to_f32(x);
    const std::string what = to_string(c.x) + " kernel " + to_string(c.kernel) + " bf16";
    auto attrs = attrs_of(c);
    attrs["count_include_pad"] = Attribute::of_int(c.include_pad);
    const std::vector<Tensor> mp = run_node("MaxPool", {x}, attrs_of(c), 2);
    ASSERT_EQ(mp[0].dtype(), DType::kBF16) << what;
    const std::vector<Tensor> mp32 = run_node("MaxPool", {x32}, attrs_of(c), 2);
    expect_close(to_f32(mp[0]), mp32[0], 0, 0);
    expect_close(mp[1], mp32[1], 0, 0);
    expect_close(to_f32(run_node("AveragePool", {x}, attrs)[0]), run_node("AveragePool", {x32}, attrs)[0], 1.0 / 256, 0);
    const Tensor dy = to_bf16(random_tensor(mp[0].dims(), 9)), dy32 = to_f32(dy);
    NodeSpec max_grad{.op = "MaxPoolGrad", .attrs = attrs_of(c), .domain = std::string(kTrainrtDomain)};
    expect_close(to_f32(run_node(max_grad, {dy, x}, cpu_kernel_table())[0]),
                 run_node(max_grad, {dy32, x32}, cpu_kernel_table())[0], 1.0 / 256, 0);
    NodeSpec avg_grad{.op = "AveragePoolGrad", .attrs = attrs, .domain = std::string(kTrainrtDomain)};
    expect_close(to_f32(run_node(avg_grad, {dy, Tensor::from_i64(c.x)}, cpu_kernel_table())[0]),
                 run_node(avg_grad, {dy32, Tensor::from_i64(c.x)}, cpu_kernel_table())[0], 1.0 / 256, 0);
  }
  const Tensor g = to_bf16(random_tensor({2, 3, 5, 7}, 10)), g32 = to_f32(g);
  expect_close(to_f32(run_node("GlobalMaxPool", {g})[0]), run_node("GlobalMaxPool", {g32})[0], 0, 0);
  expect_close(to_f32(run_node("GlobalAveragePool", {g})[0]), run_node("GlobalAveragePool", {g32})[0], 1.0 / 256, 0);
}

TEST(PoolKernels, AutoPadAndColumnMajorIndices) {
  const Tensor x = random_tensor({1, 1, 5, 4}, 4);
  // SAME_UPPER with k 2, s 2: out ceil(5/2)=3 x 2, total pad 1 in H (at the end), 0 in W.
  Case same{{1, 1, 5, 4}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 1, 0}};
  const Reference r = reference(same, x, nullptr);
  const std::vector<Tensor> mp = run_node(
      "MaxPool", {x},
      {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_UPPER")},
       {"storage_order", Attribute::of_int(1)}},
      2);
  EXPECT_EQ(mp[0].dims(), r.dims);
  expect_values(mp[0], r.max, 0, 0, "SAME_UPPER");
  std::vector<double> column_major;
  for (int64_t at : r.argmax) column_major.push_back(static_cast<double>(at % 4 * 5 + at / 4));
  expect_values(mp[1], column_major, 0, 0, "column-major Indices");
}

TEST(PoolKernels, GlobalPools) {
  const Tensor x = random_tensor({2, 3, 5, 7}, 5);
  const Tensor avg = run_node("GlobalAveragePool", {x})[0];
  const Tensor max = run_node("GlobalMaxPool", {x})[0];
  EXPECT_EQ(avg.dims(), (std::vector<int64_t>{2, 3, 1, 1}));
  std::vector<double> mean, top;
  for (int64_t p = 0; p < 6; ++p) {
    double s = 0, m = -1e30;
    for (int64_t i = 0; i < 35; ++i) s += x.to_double(p * 35 + i), m = std::max(m, x.to_double(p * 35 + i));
    mean.push_back(s / 35);
    top.push_back(m);
  }
  expect_values(avg, mean, 1e-6, 1e-7, "GlobalAveragePool");
  expect_values(max, top, 0, 0, "GlobalMaxPool");
}

// Planes of odd lengths (vector lanes plus a tail, and planes longer than one 2048-element block)
// holding NaN, -inf and all -inf: any NaN makes the plane's max NaN, else it is the largest value.
TEST(PoolKernels, GlobalMaxPoolPropagatesNanAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 5, 7, 9}, {1, 3, 1, 1}, {1, 4, 45, 47}}) {
    Tensor x = random_tensor(dims, 11);
    const int64_t planes = dims[0] * dims[1], n = x.numel() / planes;
    float* v = x.data<float>();
    for (int64_t p = 0; p < planes; ++p) {
      float* row = v + p * n;
      if (p % 4 == 0) row[(p * 37) % n] = nan;           // one NaN, anywhere
      if (p % 4 == 1) row[n - 1] = nan, row[0] = inf;    // NaN in the tail after +inf
      if (p % 4 == 2) row[(p * 13) % n] = -inf;          // -inf among finite values
      if (p % 4 == 3) std::fill(row, row + n, -inf);     // all -inf
    }
    std::vector<double> top;
    for (int64_t p = 0; p < planes; ++p) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        const double e = v[p * n + i];
        m = std::isnan(m) || std::isnan(e) ? std::nan("") : std::max(m, e);
      }
      top.push_back(m);
    }
    const Tensor y = run_node("GlobalMaxPool", {x})[0];
    for (int64_t p = 0; p < planes; ++p) {
      if (std::isnan(top[p])) EXPECT_TRUE(std::isnan(y.to_double(p))) << to_string(dims) << " plane " << p;
      else EXPECT_EQ(y.to_double(p), top[p]) << to_string(dims) << " plane " << p;
    }
  }
}

TEST(PoolKernels, BadShapesNameTheNode) {
  try {
    run_node("MaxPool", {random_tensor({2, 3, 4}, 6)}, {{"kernel_shape", ints({2, 2})}});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("MaxPool"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2, 3, 4)"), std::string::npos) << e.what();
  }
  try {
    run_node("AveragePool", {random_tensor({1, 1, 2, 2}, 7)}, {{"kernel_shape", ints({3, 3})}});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("AveragePool"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
