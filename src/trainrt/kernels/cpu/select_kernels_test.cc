#include <gtest/gtest.h>

#include <limits>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"

namespace trainrt {
namespace {

using testing::expect_same;
using testing::flat_index;
using testing::for_each_index;
using testing::iota;
using testing::make_tensor;
using testing::pick;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

std::vector<Tensor> run_opset(const std::string& op, int opset, const std::vector<Tensor>& inputs,
                              std::map<std::string, Attribute> attrs = {}, int num_outputs = 1) {
  NodeSpec spec{.op = op, .attrs = std::move(attrs), .num_outputs = num_outputs, .opset = opset};
  return run_node(spec, inputs, cpu_kernel_table());
}

// numpy.take(data, indices, axis).
Tensor reference_gather(const Tensor& data, const std::vector<int64_t>& indices,
                        const std::vector<int64_t>& index_dims, int64_t axis) {
  std::vector<int64_t> dims(data.dims().begin(), data.dims().begin() + axis);
  dims.insert(dims.end(), index_dims.begin(), index_dims.end());
  dims.insert(dims.end(), data.dims().begin() + axis + 1, data.dims().end());
  const int64_t q = static_cast<int64_t>(index_dims.size());
  std::vector<int64_t> from;
  for_each_index(dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in(o.begin(), o.begin() + axis);
    const int64_t flat = flat_index(index_dims, std::vector<int64_t>(o.begin() + axis, o.begin() + axis + q));
    int64_t idx = indices[static_cast<size_t>(flat)];
    in.push_back(idx < 0 ? idx + data.dim(axis) : idx);
    in.insert(in.end(), o.begin() + axis + q, o.end());
    from.push_back(flat_index(data.dims(), in));
  });
  return pick(data, dims, from);
}

TEST(GatherKernel, OnnxCases) {
  Tensor data = iota(DType::kF32, {5, 4, 3, 2});
  Tensor idx = Tensor::from_i64({0, 1, 3});
  Attribute axis1 = Attribute::of_int(1);
  expect_same(run_node("Gather", {data, idx})[0], reference_gather(data, {0, 1, 3}, {3}, 0));
  expect_same(run_node("Gather", {data, idx}, {{"axis", axis1}})[0],
              reference_gather(data, {0, 1, 3}, {3}, 1));
  Tensor m = iota(DType::kF32, {3, 3});
  Tensor idx2 = make_tensor<int64_t>({1, 2}, {0, 2});  // test_gather_2d_indices
  expect_same(run_node("Gather", {m, idx2}, {{"axis", axis1}})[0], reference_gather(m, {0, 2}, {1, 2}, 1));
  Tensor v = iota(DType::kF32, {10});  // test_gather_negative_indices
  expect_same(run_node("Gather", {v, Tensor::from_i64({0, -9, -10})})[0],
              make_tensor<float>({3}, {0, 1, 0}));
}

TEST(GatherKernel, EveryDTypeAxisAndIndexType) {
  for (DType t : testing::kAllDTypes) {
    Tensor data = iota(t, {3, 4, 5});
    for (int64_t axis = -3; axis < 3; ++axis) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> values{2, -1, 0, 1, -2, 0};
      Tensor i64 = make_tensor<int64_t>({2, 3}, values);
      Tensor i32 = make_tensor<int32_t>({2, 3}, {2, -1, 0, 1, -2, 0});
      Tensor want = reference_gather(data, values, {2, 3}, a);
      expect_same(run_node("Gather", {data, i64}, {{"axis", Attribute::of_int(axis)}})[0], want);
      expect_same(run_node("Gather", {data, i32}, {{"axis", Attribute::of_int(axis)}})[0], want);
    }
  }
}

TEST(GatherKernel, ScalarIndexEmbeddingRowsAndEmpty) {
  Tensor table = iota(DType::kF32, {1000, 64});
  Tensor ids = make_tensor<int64_t>({4, 50}, std::vector<int64_t>(200, 7));
  for (int64_t i = 0; i < 200; ++i) ids.data<int64_t>()[i] = (i * 37) % 1000;
  expect_same(run_node("Gather", {table, ids})[0],
              reference_gather(table, ids.to_i64_vector(), {4, 50}, 0));
  Tensor row = run_node("Gather", {table, Tensor::scalar<int64_t>(3)})[0];
  EXPECT_EQ(row.dims(), (std::vector<int64_t>{64}));
  EXPECT_EQ(row.data<float>()[0], 3 * 64);
  Tensor none = run_node("Gather", {table, Tensor::from_i64({})})[0];
  EXPECT_EQ(none.dims(), (std::vector<int64_t>{0, 64}));
}

TEST(GatherKernel, OutOfRangeIndexIsAShapeErrorNamingTheNode) {
  Tensor data = iota(DType::kF32, {3, 2});
  try {
    run_node("Gather", {data, Tensor::from_i64({0, 3})});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(Gather)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
  }
  EXPECT_THROW(run_node("Gather", {data, Tensor::from_i64({-4})}), ShapeError);
  EXPECT_THROW(run_node("Gather", {data, Tensor::from_i64({0})}, {{"axis", Attribute::of_int(2)}}),
               ShapeError);
}

// numpy.concatenate(inputs, axis).
Tensor reference_concat(const std::vector<Tensor>& inputs, int64_t axis) {
  std::vector<int64_t> dims = inputs[0].dims();
  dims[static_cast<size_t>(axis)] = 0;
  for (const Tensor& t : inputs) dims[static_cast<size_t>(axis)] += t.dim(axis);
  Tensor out = Tensor::empty(inputs[0].dtype(), dims);
  const size_t es = dtype_size(out.dtype());
  int64_t i = 0;
  for_each_index(dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in = o;
    size_t k = 0;
    int64_t& along = in[static_cast<size_t>(axis)];
    while (along >= inputs[k].dim(axis)) along -= inputs[k++].dim(axis);
    std::memcpy(static_cast<char*>(out.raw()) + i++ * es,
                static_cast<const char*>(inputs[k].raw()) + flat_index(inputs[k].dims(), in) * es, es);
  });
  return out;
}

TEST(ConcatKernel, OnnxCasesAllAxesInEveryDType) {
  for (DType t : testing::kAllDTypes) {
    for (int64_t rank = 1; rank <= 3; ++rank) {
      std::vector<int64_t> dims(static_cast<size_t>(rank), 2);
      Tensor a = iota(t, dims), b = iota(t, dims);
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const int64_t ax = axis < 0 ? axis + rank : axis;
        expect_same(run_node("Concat", {a, b}, {{"axis", Attribute::of_int(axis)}})[0],
                    reference_concat({a, b}, ax));
      }
    }
  }
}

TEST(ConcatKernel, UnequalSizesEmptyInputsAndOldDefaultAxis) {
  Tensor a = iota(DType::kF32, {2, 3, 4}), b = iota(DType::kF32, {2, 5, 4}), e = iota(DType::kF32, {2, 0, 4});
  expect_same(run_node("Concat", {a, e, b}, {{"axis", Attribute::of_int(1)}})[0],
              reference_concat({a, e, b}, 1));
  expect_same(run_opset("Concat", 1, {a, b})[0], reference_concat({a, b}, 1));  // Concat-1: axis 1
  EXPECT_THROW(run_node("Concat", {a, b}), ShapeError);                        // required from opset 4
  EXPECT_THROW(run_node("Concat", {a, b}, {{"axis", Attribute::of_int(0)}}), ShapeError);
  EXPECT_THROW(run_node("Concat", {a, Tensor::from_i64({1})}, {{"axis", Attribute::of_int(0)}}), ShapeError);
}

void expect_split(const std::vector<Tensor>& outs, const std::vector<std::vector<float>>& want,
                  const std::vector<std::vector<int64_t>>& dims) {
  ASSERT_EQ(outs.size(), want.size());
  for (size_t i = 0; i < outs.size(); ++i) expect_same(outs[i], make_tensor<float>(dims[i], want[i]));
}

TEST(SplitKernel, OnnxOpset13And18Cases) {
  Tensor x = make_tensor<float>({6}, {1, 2, 3, 4, 5, 6});
  for (int opset : {13, 18}) {
    std::map<std::string, Attribute> attrs;
    if (opset == 18) attrs["num_outputs"] = Attribute::of_int(3);
    expect_split(run_opset("Split", opset, {x}, attrs, 3), {{1, 2}, {3, 4}, {5, 6}}, {{2}, {2}, {2}});
    expect_split(run_opset("Split", opset, {x, Tensor::from_i64({2, 4})}, {}, 2), {{1, 2}, {3, 4, 5, 6}},
                 {{2}, {4}});
    Tensor m = make_tensor<float>({2, 6}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    std::map<std::string, Attribute> axis1{{"axis", Attribute::of_int(1)}};
    if (opset == 18) axis1["num_outputs"] = Attribute::of_int(2);
    expect_split(run_opset("Split", opset, {m}, axis1, 2), {{1, 2, 3, 7, 8, 9}, {4, 5, 6, 10, 11, 12}},
                 {{2, 3}, {2, 3}});
    std::map<std::string, Attribute> only_axis1{{"axis", Attribute::of_int(1)}};
    expect_split(run_opset("Split", opset, {m, Tensor::from_i64({2, 4})}, only_axis1, 2),
                 {{1, 2, 7, 8}, {3, 4, 5, 6, 9, 10, 11, 12}}, {{2, 2}, {2, 4}});
    Tensor empty = make_tensor<float>({0}, {});  // test_split_zero_size_splits
    expect_split(run_opset("Split", opset, {empty, Tensor::from_i64({0, 0, 0})}, {}, 3), {{}, {}, {}},
                 {{0}, {0}, {0}});
  }
}

TEST(SplitKernel, UnevenNumOutputsOldAttributeAndErrors) {
  Tensor x = make_tensor<float>({7}, {1, 2, 3, 4, 5, 6, 7});  // test_split_1d_uneven_split_opset18
  expect_split(run_opset("Split", 18, {x}, {{"num_outputs", Attribute::of_int(4)}}, 4),
               {{1, 2}, {3, 4}, {5, 6}, {7}}, {{2}, {2}, {2}, {1}});
  Tensor m = iota(DType::kF32, {2, 8});  // test_split_2d_uneven_split_opset18
  std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(-1)},
                                         {"num_outputs", Attribute::of_int(3)}};
  std::vector<Tensor> parts = run_opset("Split", 18, {m}, attrs, 3);
  EXPECT_EQ(parts[2].dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(parts[2].data<float>()[0], 6.f);
  // Split-11 takes the sizes as an attribute.
  expect_split(run_opset("Split", 11, {x}, {{"split", Attribute::of_ints({3, 4})}}, 2),
               {{1, 2, 3}, {4, 5, 6, 7}}, {{3}, {4}});
  EXPECT_THROW(run_opset("Split", 13, {x, Tensor::from_i64({3, 3})}, {}, 2), ShapeError);
  EXPECT_THROW(run_opset("Split", 18, {x}, {{"num_outputs", Attribute::of_int(3)}}, 2), ShapeError);
  for (DType t : testing::kAllDTypes) {
    Tensor y = iota(t, {3, 4, 2});
    std::vector<Tensor> outs =
        run_opset("Split", 13, {y, Tensor::from_i64({1, 3})}, {{"axis", Attribute::of_int(1)}}, 2);
    Tensor joined = run_node("Concat", outs, {{"axis", Attribute::of_int(1)}})[0];
    expect_same(joined, y);
  }
}

// numpy x[starts:ends:steps] along axes, element by element.
Tensor reference_slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                       const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  std::vector<int64_t> first(static_cast<size_t>(x.rank()), 0), step(static_cast<size_t>(x.rank()), 1);
  std::vector<int64_t> dims = x.dims();
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(axes[i] < 0 ? axes[i] + x.rank() : axes[i]);
    const int64_t n = x.dims()[a], st = steps[i];
    // Python's slice.indices(n).
    const auto fix = [&](int64_t v) {
      if (v < 0) return v + n < 0 ? (st > 0 ? 0 : -1) : v + n;
      return v >= n ? (st > 0 ? n : n - 1) : v;
    };
    const int64_t s = fix(starts[i]), e = fix(ends[i]);
    std::vector<int64_t> picked;
    for (int64_t k = s; st > 0 ? k < e : k > e; k += st) picked.push_back(k);
    dims[a] = static_cast<int64_t>(picked.size());
    first[a] = picked.empty() ? 0 : picked[0];
    step[a] = st;
  }
  std::vector<int64_t> from;
  for_each_index(dims, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> in(o.size());
    for (size_t j = 0; j < o.size(); ++j) in[j] = first[j] + o[j] * step[j];
    from.push_back(flat_index(x.dims(), in));
  });
  return pick(x, dims, from);
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  return run_node("Slice", {x, Tensor::from_i64(starts), Tensor::from_i64(ends), Tensor::from_i64(axes),
                            Tensor::from_i64(steps)})[0];
}

TEST(SliceKernel, OnnxCases) {
  Tensor x = iota(DType::kF32, {20, 10, 5});
  expect_same(slice(x, {0, 0}, {3, 10}, {0, 1}, {1, 1}), reference_slice(x, {0, 0}, {3, 10}, {0, 1}, {1, 1}));
  expect_same(slice(x, {0}, {-1}, {1}, {1}), reference_slice(x, {0}, {-1}, {1}, {1}));  // test_slice_neg
  EXPECT_EQ(slice(x, {1000}, {1000}, {1}, {1}).dims(), (std::vector<int64_t>{20, 0, 5}));
  expect_same(slice(x, {1}, {1000}, {1}, {1}), reference_slice(x, {1}, {1000}, {1}, {1}));
  Tensor starts = Tensor::from_i64({0, 0, 3}), ends = Tensor::from_i64({20, 10, 4});
  Tensor want = reference_slice(x, {0, 0, 3}, {20, 10, 4}, {0, 1, 2}, {1, 1, 1});
  expect_same(run_node("Slice", {x, starts, ends})[0], want);  // test_slice_default_axes
  expect_same(run_node("Slice", {x, starts, ends, Tensor::from_i64({0, 1, 2})})[0], want);
  expect_same(run_node("Slice", {x, starts, ends, Tensor::from_i64({0, -2, -1})})[0], want);
  // test_slice_neg_steps: x[20:0:-1, 10:0:-3, 4:1:-2]
  expect_same(slice(x, {20, 10, 4}, {0, 0, 1}, {0, 1, 2}, {-1, -3, -2}),
              reference_slice(x, {20, 10, 4}, {0, 0, 1}, {0, 1, 2}, {-1, -3, -2}));
}

TEST(SliceKernel, ExtremeBoundsReversalAndDTypes) {
  Tensor x = iota(DType::kI64, {6, 7});
  // Full reversal with INT64 bounds, as exporters write x[::-1].
  expect_same(slice(x, {-1}, {kMin}, {1}, {-1}), reference_slice(x, {-1}, {kMin}, {1}, {-1}));
  expect_same(slice(x, {kMin}, {kMax}, {0}, {2}), reference_slice(x, {0}, {6}, {0}, {2}));
  expect_same(slice(x, {2}, {kMax}, {-1}, {kMax}), reference_slice(x, {2}, {7}, {1}, {100}));
  expect_same(slice(x, {5}, {-100}, {0}, {kMin}), reference_slice(x, {5}, {-100}, {0}, {-100}));
  EXPECT_EQ(slice(x, {3}, {1}, {0}, {1}).dims(), (std::vector<int64_t>{0, 7}));
  for (DType t : testing::kAllDTypes) {
    Tensor y = iota(t, {4, 5, 6});
    Tensor i32s = make_tensor<int32_t>({2}, {-1, 1}), i32e = make_tensor<int32_t>({2}, {-5, 6});
    Tensor i32a = make_tensor<int32_t>({2}, {0, 2}), i32p = make_tensor<int32_t>({2}, {-1, 2});
    expect_same(run_node("Slice", {y, i32s, i32e, i32a, i32p})[0],
                reference_slice(y, {-1, 1}, {-5, 6}, {0, 2}, {-1, 2}));
  }
  EXPECT_THROW(slice(x, {0}, {1}, {0}, {0}), ShapeError);
  EXPECT_THROW(slice(x, {0, 0}, {1, 1}, {0, -2}, {1, 1}), ShapeError);
}

TEST(SliceKernel, Opset1Attributes) {
  Tensor x = iota(DType::kF32, {4, 6});
  std::map<std::string, Attribute> attrs{{"starts", Attribute::of_ints({1, -4})},
                                         {"ends", Attribute::of_ints({kMax, -1})},
                                         {"axes", Attribute::of_ints({0, 1})}};
  expect_same(run_opset("Slice", 1, {x}, attrs)[0], reference_slice(x, {1, -4}, {4, -1}, {0, 1}, {1, 1}));
  attrs.erase("axes");
  expect_same(run_opset("Slice", 1, {x}, attrs)[0], reference_slice(x, {1, -4}, {4, -1}, {0, 1}, {1, 1}));
}

}  // namespace
}  // namespace trainrt
