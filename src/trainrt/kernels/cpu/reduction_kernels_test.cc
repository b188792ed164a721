// Reduce* kernels against a double-precision reference that groups elements by their kept index.
#include <cmath>
#include <limits>
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

const char* const kAllOps[] = {"ReduceSum", "ReduceMean", "ReduceMax",       "ReduceMin",    "ReduceProd",
                               "ReduceL1",  "ReduceL2",   "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"};

double fold(const std::string& op, const std::vector<double>& v) {
  const double inf = std::numeric_limits<double>::infinity();
  double acc = op == "ReduceProd" ? 1 : op == "ReduceMax" ? -inf : op == "ReduceMin" ? inf : 0;
  double max = -inf;
  for (double x : v) max = std::max(max, x);
  for (double x : v) {
    if (op == "ReduceProd") acc *= x;
    else if (op == "ReduceMax") acc = std::max(acc, x);
    else if (op == "ReduceMin") acc = std::min(acc, x);
    else if (op == "ReduceL1") acc += std::abs(x);
    else if (op == "ReduceL2" || op == "ReduceSumSquare") acc += x * x;
    else if (op == "ReduceLogSumExp") acc += std::exp(x - max);
    else acc += x;
  }
  if (op == "ReduceMean") return acc / static_cast<double>(v.size());
  if (op == "ReduceL2") return std::sqrt(acc);
  if (op == "ReduceLogSum") return std::log(acc);
  if (op == "ReduceLogSumExp") return v.empty() ? -inf : max + std::log(acc);
  return acc;
}

// The reference: every element goes to the output slot of its kept coordinates.
std::vector<double> reference(const std::string& op, const Tensor& x, const std::vector<bool>& mask) {
  const auto& dims = x.dims();
  int64_t outputs = 1;
  for (size_t k = 0; k < dims.size(); ++k)
    if (!mask[k]) outputs *= dims[k];
  std::vector<std::vector<double>> groups(static_cast<size_t>(outputs));
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, slot = 0, slot_stride = 1;
    for (size_t k = dims.size(); k-- > 0;) {
      const int64_t c = rest % dims[k];
      rest /= dims[k];
      if (!mask[k]) {
        slot += c * slot_stride;
        slot_stride *= dims[k];
      }
    }
    groups[static_cast<size_t>(slot)].push_back(x.to_double(i));
  }
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(fold(op, g));
  return out;
}

std::vector<bool> mask_of(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) mask[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  return mask;
}

std::vector<int64_t> reduced_dims(const std::vector<int64_t>& dims, const std::vector<bool>& mask, bool keepdims) {
  std::vector<int64_t> out;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (!mask[k]) out.push_back(dims[k]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

Tensor reduce(const std::string& op, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims,
              int opset = 18) {
  NodeSpec spec{.op = op, .attrs = {{"keepdims", Attribute::of_int(keepdims)}}, .opset = opset};
  return run_node(spec, {x, Tensor::from_i64(axes)}, cpu_kernel_table())[0];
}


// x as another dtype, element by element (x holds small values every dtype can represent).
Tensor cast_to(const Tensor& x, DType t) {
  Tensor y = Tensor::empty(t, x.dims());
  visit_dtype(t, [&]<typename T>() {
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.to_double(i);
      if constexpr (std::is_same_v<T, Half>) y.data<T>()[i].bits = f32_to_f16(static_cast<float>(v));
      else if constexpr (std::is_same_v<T, BFloat16>) y.data<T>()[i].bits = f32_to_bf16(static_cast<float>(v));
      else y.data<T>()[i] = static_cast<T>(v);
    }
  });
  return y;
}

TEST(ReduceKernels, EveryOpEveryAxisLayoutF32) {
  // Odd sizes; positive values so LogSum and Prod stay finite.
  const Tensor x = random_tensor({3, 37, 5}, 1, 0.5f, 1.5f);
  const std::vector<std::vector<int64_t>> axis_sets = {{2}, {1}, {0}, {-1}, {-3}, {0, 1}, {1, 2}, {0, 2}, {}};
  for (const char* op : kAllOps) {
    for (const auto& axes : axis_sets) {
      for (bool keepdims : {true, false}) {
        const std::vector<bool> mask = mask_of(axes, 3);
        const Tensor y = reduce(op, x, axes, keepdims);
        const std::string what = fmt(op, " axes ", to_string(axes), " keepdims ", keepdims);
        EXPECT_EQ(y.dims(), reduced_dims(x.dims(), mask, keepdims)) << what;
        expect_values(y, reference(op, x, mask), 2e-6, 1e-7, what);
      }
    }
  }
}

TEST(ReduceKernels, FourDimsWithSplitReducedAxes) {
  // Axes {0, 2} and {1, 3} are not one contiguous group: the kernel moves them last first.
  const Tensor x = random_tensor({4, 3, 6, 5}, 2, -2.f, 2.f);
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceLogSumExp", "ReduceL2"}) {
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0, 2}, {1, 3}, {-1, 1}, {0, 1, 3}}) {
      const Tensor y = reduce(op, x, axes, true);
      expect_values(y, reference(op, x, mask_of(axes, 4)), 2e-6, 1e-6, fmt(op, " axes ", to_string(axes)));
    }
  }
}

TEST(ReduceKernels, AxesAsAttributeInOldOpsets) {
  const Tensor x = random_tensor({2, 7, 3}, 3);
  NodeSpec sum11{.op = "ReduceSum", .attrs = {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}},
                 .opset = 11};
  expect_values(run_node(sum11, {x}, cpu_kernel_table())[0], reference("ReduceSum", x, {false, true, false}), 1e-6,
                1e-7, "ReduceSum-11");
  NodeSpec max13{.op = "ReduceMax", .attrs = {{"axes", Attribute::of_ints({-1, 0})}}, .opset = 13};
  const Tensor y = run_node(max13, {x}, cpu_kernel_table())[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 7, 1}));
  expect_values(y, reference("ReduceMax", x, {true, false, true}), 0, 0, "ReduceMax-13");
  // No axes at all: every axis.
  NodeSpec mean{.op = "ReduceMean", .opset = 18};
  expect_values(run_node(mean, {x}, cpu_kernel_table())[0], reference("ReduceMean", x, {true, true, true}), 1e-6,
                1e-7, "ReduceMean default axes");
}

TEST(ReduceKernels, NoopWithEmptyAxesMapsElementwise) {
  const Tensor x = random_tensor({3, 4}, 4);
  for (const char* op : {"ReduceSum", "ReduceSumSquare", "ReduceL2"}) {
    NodeSpec spec{.op = op, .attrs = {{"noop_with_empty_axes", Attribute::of_int(1)}}};
    const Tensor y = run_node(spec, {x, Tensor::from_i64({})}, cpu_kernel_table())[0];
    EXPECT_EQ(y.dims(), x.dims());
    expect_values(y, reference(op, x, {false, false}), 1e-6, 0, op);
  }
}

TEST(ReduceKernels, EmptySetsGiveTheIdentity) {
  const Tensor x = Tensor::empty(DType::kF32, {2, 0, 4});
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> cases[] = {
      {"ReduceSum", 0},         {"ReduceProd", 1},   {"ReduceMax", -inf},   {"ReduceMin", inf},
      {"ReduceL1", 0},          {"ReduceL2", 0},     {"ReduceSumSquare", 0}, {"ReduceLogSum", -inf},
      {"ReduceLogSumExp", -inf}};
  for (const auto& [op, value] : cases) {
    const Tensor y = reduce(op, x, {1}, true);
    EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 1, 4})) << op;
    expect_values(y, std::vector<double>(8, value), 0, 0, op);
    // The kept axis of extent 0 gives an empty output.
    EXPECT_EQ(reduce(op, x, {2}, true).dims(), (std::vector<int64_t>{2, 0, 1})) << op;
  }
  const Tensor b = Tensor::empty(DType::kBool, {2, 0, 4});
  expect_values(reduce("ReduceMax", b, {1}, true), std::vector<double>(8, 0), 0, 0, "bool ReduceMax");
  expect_values(reduce("ReduceMin", b, {1}, true), std::vector<double>(8, 1), 0, 0, "bool ReduceMin");
}

TEST(ReduceKernels, OtherFloatTypes) {
  const Tensor x = random_tensor({5, 19, 3}, 5, 0.5f, 1.5f);
  for (DType t : {DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor xt = cast_to(x, t);
    const double rtol = t == DType::kF64 ? 1e-12 : t == DType::kF16 ? 2e-3 : 1.6e-2;
    for (const char* op : kAllOps) {
      for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, {2}, {0, 2}}) {
        const Tensor y = reduce(op, xt, axes, false);
        ASSERT_EQ(y.dtype(), t);
        // The reference folds the same (rounded) input values in double.
        expect_values(y, reference(op, xt, mask_of(axes, 3)), rtol, 1e-6, fmt(dtype_name(t), " ", op));
      }
    }
  }
}

TEST(ReduceKernels, IntegerTypesAreExact) {
  const Tensor x = make_tensor<int32_t>({2, 3, 2}, {1, -2, 3, 4, -5, 6, 7, 8, -9, 10, 11, 12});
  for (DType t : {DType::kI32, DType::kI64, DType::kI8}) {
    const Tensor xt = cast_to(x, t);
    for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare"}) {
      const std::string name = op;
      if (t == DType::kI8 && (name == "ReduceProd" || name == "ReduceSumSquare")) continue;  // would wrap
      for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, {0, 2}}) {
        const Tensor y = reduce(op, xt, axes, true);
        ASSERT_EQ(y.dtype(), t);
        expect_values(y, reference(op, xt, mask_of(axes, 3)), 0, 0, fmt(dtype_name(t), " ", op));
      }
    }
  }
  // Integer mean truncates toward zero, like the reference's astype.
  expect_values(reduce("ReduceMean", make_tensor<int64_t>({1, 2}, {-3, 0}), {1}, true), {-1}, 0, 0, "i64 mean");
  const Tensor u = make_tensor<uint8_t>({2, 2}, {200, 3, 7, 255});
  expect_values(reduce("ReduceMax", u, {1}, false), {200, 255}, 0, 0, "u8 max");
  expect_values(reduce("ReduceMin", u, {0}, false), {7, 3}, 0, 0, "u8 min");
}

TEST(ReduceKernels, BoolMaxIsAnyMinIsAll) {
  const Tensor b = make_tensor<bool>({4, 2}, {true, true, true, false, false, true, false, false});
  const Tensor any = reduce("ReduceMax", b, {1}, true);
  EXPECT_EQ(any.dtype(), DType::kBool);
  expect_values(any, {1, 1, 1, 0}, 0, 0, "any");
  expect_values(reduce("ReduceMin", b, {1}, true), {1, 0, 0, 0}, 0, 0, "all");
}

TEST(ReduceKernels, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(2 * 40, 1.f);
  v[17] = nan;       // row 0, in the vectorized part
  v[40 + 39] = nan;  // row 1, in the tail
  const Tensor x = make_tensor<float>({2, 40}, v);
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    const Tensor rows = reduce(op, x, {1}, false);
    EXPECT_TRUE(std::isnan(rows.to_double(0)) && std::isnan(rows.to_double(1))) << op;
    const Tensor cols = reduce(op, x, {0}, false);
    EXPECT_TRUE(std::isnan(cols.to_double(17)) && std::isnan(cols.to_double(39))) << op;
    EXPECT_EQ(cols.to_double(0), 1.0) << op;
  }
}

TEST(ReduceKernels, LogSumExpOfLargeValuesDoesNotOverflow) {
  const Tensor x = make_tensor<float>({2, 3}, {1000, 1000, 999, -1000, -1001, -1e30f});
  const Tensor y = reduce("ReduceLogSumExp", x, {1}, false);
  expect_values(y, reference("ReduceLogSumExp", x, {false, true}), 1e-6, 0, "rows");
  const Tensor t = reduce("ReduceLogSumExp", x, {0}, false);
  expect_values(t, reference("ReduceLogSumExp", x, {true, false}), 1e-6, 0, "columns");
}

TEST(ReduceKernels, LargeInputsTakeTheParallelPaths) {
  // Rows (inner == 1) and column folds (inner > 1), each past the size that splits across threads.
  const Tensor rows = random_tensor({301, 1111}, 6, 0.5f, 1.5f);
  const Tensor slab = random_tensor({7, 1111, 45}, 7, 0.5f, 1.5f);
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp", "ReduceL2"}) {
    expect_values(reduce(op, rows, {1}, false), reference(op, rows, {false, true}), 2e-6, 0, fmt(op, " rows"));
    expect_values(reduce(op, rows, {0}, false), reference(op, rows, {true, false}), 2e-5, 0, fmt(op, " columns"));
    expect_values(reduce(op, slab, {1}, false), reference(op, slab, {false, true, false}), 2e-5, 0, fmt(op, " slab"));
  }
  // A reduction over every axis: one long row, split across threads and merged.
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceLogSumExp"}) {
    const Tensor y = reduce(op, rows, {}, false);
    expect_values(y, reference(op, rows, {true, true}), 2e-5, 0, fmt(op, " all axes"));
  }
  // f16 / bf16 column blocks are staged a group of rows at a time (here two groups).
  const Tensor tall = random_tensor({2, 3000, 40}, 8, 0.5f, 1.5f);
  for (DType t : {DType::kF16, DType::kBF16}) {
    const Tensor x = cast_to(tall, t);
    for (const char* op : {"ReduceSum", "ReduceMax", "ReduceLogSumExp"}) {
      expect_values(reduce(op, x, {1}, false), reference(op, x, {false, true, false}), 1e-2, 0,
                    fmt(dtype_name(t), " ", op, " tall slab"));
    }
  }
}

TEST(ReduceKernels, BadAxesNameTheNode) {
  const Tensor x = random_tensor({2, 3}, 8);
  try {
    reduce("ReduceSum", x, {2}, true);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'node' (ReduceSum)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("axis 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reduce("ReduceMean", x, {1, -1}, true), ShapeError);
  EXPECT_THROW(reduce("ReduceSum", make_tensor<bool>({2}, {true, false}), {0}, true), ShapeError);
}

}  // namespace
}  // namespace trainrt
