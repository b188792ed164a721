#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/kernels/cpu/tensor_test_util.h"
#include "trainrt/kernels/kernel.h"

namespace trainrt {
namespace {

using testing::expect_same;
using testing::iota;
using testing::make_tensor;

std::vector<Tensor> run_opset(const std::string& op, int opset, const std::vector<Tensor>& inputs,
                              std::map<std::string, Attribute> attrs = {}, int num_outputs = 1) {
  NodeSpec spec{.op = op, .attrs = std::move(attrs), .num_outputs = num_outputs, .opset = opset};
  return run_node(spec, inputs, cpu_kernel_table());
}

// The input's bytes under new dims: what every reshape-like op must produce.
Tensor as_dims(const Tensor& x, std::vector<int64_t> dims) { return x.clone().reshaped(std::move(dims)); }

Attribute int_attr(int64_t v) { return Attribute::of_int(v); }

Tensor constant(const std::string& attr, Attribute value) {
  return run_node("Constant", {}, {{attr, std::move(value)}})[0];
}

Tensor constant_of_shape(const std::vector<int64_t>& dims, const Tensor& value) {
  return run_node("ConstantOfShape", {Tensor::from_i64(dims)}, {{"value", Attribute::of_tensor(value)}})[0];
}

template <typename T>
std::vector<Tensor> range_inputs(T start, T limit, T delta) {
  return {Tensor::scalar<T>(start), Tensor::scalar<T>(limit), Tensor::scalar<T>(delta)};
}

TEST(ReshapeKernel, OnnxCases) {
  Tensor x = iota(DType::kF32, {2, 3, 4});
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 2, 3}, {4, 2, 3}},     {{2, 4, 3}, {2, 4, 3}},       {{2, 12}, {2, 12}},
      {{2, 3, 2, 2}, {2, 3, 2, 2}}, {{24}, {24}},                {{2, -1, 2}, {2, 6, 2}},
      {{-1, 2, 3, 4}, {1, 2, 3, 4}}, {{2, 0, 4, 1}, {2, 3, 4, 1}}, {{2, 0, 1, -1}, {2, 3, 1, 4}}};
  for (const auto& [shape, dims] : cases)
    expect_same(run_node("Reshape", {x, Tensor::from_i64(shape)})[0], as_dims(x, dims));
  Tensor empty = iota(DType::kF32, {0, 3, 4});  // test_reshape_allowzero_reordered
  Tensor y = run_node("Reshape", {empty, Tensor::from_i64({3, 4, 0})}, {{"allowzero", int_attr(1)}})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_THROW(run_node("Reshape", {empty, Tensor::from_i64({3, 4, 0})}), ShapeError);  // 0 copies dim 2 = 4
}

TEST(ReshapeKernel, Opset1ShapeAttributeAndErrors) {
  Tensor x = iota(DType::kI8, {2, 6});
  expect_same(run_opset("Reshape", 1, {x}, {{"shape", Attribute::of_ints({3, -1})}})[0], as_dims(x, {3, 4}));
  EXPECT_THROW(run_node("Reshape", {x, Tensor::from_i64({5, -1})}), ShapeError);
  EXPECT_THROW(run_node("Reshape", {x, Tensor::from_i64({-1, -1})}), ShapeError);
  EXPECT_THROW(run_node("Reshape", {x, Tensor::from_i64({7})}), ShapeError);
  EXPECT_THROW(run_node("Reshape", {x, Tensor::from_i64({2, 0, -1})}, {{"allowzero", Attribute::of_int(1)}}),
               ShapeError);
}

TEST(ReshapeKernel, InPlaceBufferIsLeftAsItIs) {
  Graph g;
  g.set_opset("", 23);
  Value* x = g.add_input("x", DType::kF32, Shape({2, 6}));
  Value* shape = g.add_initializer("shape", Tensor::from_i64({3, 4}));
  Node* node = g.add_node("Reshape", {x, shape}, {"y"});
  KernelFn kernel = cpu_kernel_table().create(*node);
  Tensor in = iota(DType::kF32, {2, 6});
  Tensor out = in.reshaped({3, 4});  // the planner aliased the output onto the input
  std::vector<const Tensor*> ins{&in, &shape->data};
  std::vector<Tensor*> outs{&out};
  KernelContext ctx{.inputs = ins, .outputs = outs};
  kernel(ctx);
  expect_same(out, as_dims(iota(DType::kF32, {2, 6}), {3, 4}));
}

TEST(FlattenKernel, OnnxCasesInEveryDType) {
  for (DType t : testing::kAllDTypes) {
    Tensor x = iota(t, {2, 3, 4, 5});
    const std::vector<int64_t> dims{2, 3, 4, 5};
    for (int64_t axis = -4; axis <= 4; ++axis) {
      const int64_t a = axis < 0 ? axis + 4 : axis;
      int64_t outer = 1;
      for (int64_t i = 0; i < a; ++i) outer *= dims[static_cast<size_t>(i)];
      expect_same(run_node("Flatten", {x}, {{"axis", int_attr(axis)}})[0], as_dims(x, {outer, 120 / outer}));
    }
    expect_same(run_node("Flatten", {x})[0], as_dims(x, {2, 60}));  // default axis 1
  }
  EXPECT_THROW(run_node("Flatten", {iota(DType::kF32, {2, 3})}, {{"axis", int_attr(3)}}), ShapeError);
}

TEST(SqueezeKernel, InputAndAttributeAxes) {
  Tensor x = iota(DType::kF32, {1, 3, 4, 5});
  expect_same(run_node("Squeeze", {x, Tensor::from_i64({0})})[0], as_dims(x, {3, 4, 5}));  // test_squeeze
  Tensor y = iota(DType::kBool, {1, 3, 1, 5});
  expect_same(run_node("Squeeze", {y, Tensor::from_i64({-2})})[0], as_dims(y, {1, 3, 5}));
  expect_same(run_node("Squeeze", {y})[0], as_dims(y, {3, 5}));  // no axes: every size-1 dim
  expect_same(run_opset("Squeeze", 11, {y}, {{"axes", Attribute::of_ints({0, 2})}})[0], as_dims(y, {3, 5}));
  EXPECT_THROW(run_node("Squeeze", {y, Tensor::from_i64({1})}), ShapeError);
  EXPECT_THROW(run_node("Squeeze", {y, Tensor::from_i64({0, -4})}), ShapeError);
}

TEST(UnsqueezeKernel, OnnxCasesAndAttributeAxes) {
  Tensor x = iota(DType::kF16, {3, 4, 5});
  expect_same(run_node("Unsqueeze", {x, Tensor::from_i64({0})})[0], as_dims(x, {1, 3, 4, 5}));
  expect_same(run_node("Unsqueeze", {x, Tensor::from_i64({3})})[0], as_dims(x, {3, 4, 5, 1}));
  expect_same(run_node("Unsqueeze", {x, Tensor::from_i64({1, 4})})[0], as_dims(x, {3, 1, 4, 5, 1}));
  expect_same(run_node("Unsqueeze", {x, Tensor::from_i64({2, 4, 5})})[0], as_dims(x, {3, 4, 1, 5, 1, 1}));
  expect_same(run_node("Unsqueeze", {x, Tensor::from_i64({5, 4, 2})})[0], as_dims(x, {3, 4, 1, 5, 1, 1}));
  Tensor y = iota(DType::kF32, {1, 3, 1, 5});
  expect_same(run_node("Unsqueeze", {y, Tensor::from_i64({-2})})[0], as_dims(y, {1, 3, 1, 1, 5}));
  expect_same(run_opset("Unsqueeze", 11, {x}, {{"axes", Attribute::of_ints({0, -1})}})[0],
              as_dims(x, {1, 3, 4, 5, 1}));
  Tensor s = Tensor::scalar<int64_t>(7);
  expect_same(run_node("Unsqueeze", {s, Tensor::from_i64({0})})[0], as_dims(s, {1}));
  EXPECT_THROW(run_node("Unsqueeze", {x, Tensor::from_i64({1, 1})}), ShapeError);
  EXPECT_THROW(run_node("Unsqueeze", {x, Tensor::from_i64({4})}), ShapeError);
}

TEST(ShapeKernel, StartAndEndAttributes) {
  Tensor x = iota(DType::kF32, {3, 4, 5});
  const auto shape = [&](std::map<std::string, Attribute> attrs) { return run_node("Shape", {x}, attrs)[0]; };
  const auto attr = [](int64_t v) { return Attribute::of_int(v); };
  expect_same(shape({}), Tensor::from_i64({3, 4, 5}));
  expect_same(shape({{"start", attr(1)}}), Tensor::from_i64({4, 5}));
  expect_same(shape({{"end", attr(1)}}), Tensor::from_i64({3}));
  expect_same(shape({{"start", attr(-1)}}), Tensor::from_i64({5}));
  expect_same(shape({{"end", attr(-1)}}), Tensor::from_i64({3, 4}));
  expect_same(shape({{"start", attr(1)}, {"end", attr(-1)}}), Tensor::from_i64({4}));
  expect_same(shape({{"start", attr(1)}, {"end", attr(2)}}), Tensor::from_i64({4}));
  expect_same(shape({{"start", attr(-10)}}), Tensor::from_i64({3, 4, 5}));
  expect_same(shape({{"end", attr(10)}}), Tensor::from_i64({3, 4, 5}));
  expect_same(shape({{"start", attr(2)}, {"end", attr(1)}}), Tensor::from_i64({}));
  expect_same(run_node("Shape", {Tensor::scalar<bool>(true)})[0], Tensor::from_i64({}));
}

TEST(SizeKernel, CountsElements) {
  expect_same(run_node("Size", {iota(DType::kF32, {2, 3})})[0], Tensor::scalar<int64_t>(6));
  expect_same(run_node("Size", {iota(DType::kU8, {3, 4, 5})})[0], Tensor::scalar<int64_t>(60));
  expect_same(run_node("Size", {iota(DType::kF32, {3, 0})})[0], Tensor::scalar<int64_t>(0));
}

TEST(ConstantKernel, EveryValueForm) {
  Tensor v = iota(DType::kBF16, {5, 5});
  expect_same(constant("value", Attribute::of_tensor(v)), v);
  expect_same(constant("value_float", Attribute::of_float(2.5f)), Tensor::scalar<float>(2.5f));
  expect_same(constant("value_floats", Attribute::of_floats({1, 2})), make_tensor<float>({2}, {1, 2}));
  expect_same(constant("value_int", int_attr(-3)), Tensor::scalar<int64_t>(-3));
  expect_same(constant("value_ints", Attribute::of_ints({4, 5})), Tensor::from_i64({4, 5}));
  EXPECT_THROW(constant("value_string", Attribute::of_string("a")), UnsupportedOp);
  EXPECT_THROW(constant("value_strings", Attribute::of_strings({"a"})), UnsupportedOp);
  EXPECT_THROW(run_node("Constant", {}, {}), InvalidModel);
  std::map<std::string, Attribute> two{{"value_int", int_attr(1)}, {"value_float", Attribute::of_float(1)}};
  EXPECT_THROW(run_node("Constant", {}, two), InvalidModel);
}

TEST(ConstantOfShapeKernel, OnnxCasesAndDTypes) {
  expect_same(constant_of_shape({4, 3, 2}, make_tensor<float>({1}, {1})),
              make_tensor<float>({4, 3, 2}, std::vector<float>(24, 1.f)));
  Tensor zero32 = make_tensor<int32_t>({1}, {0});
  expect_same(constant_of_shape({10, 6}, zero32), make_tensor<int32_t>({10, 6}, std::vector<int32_t>(60, 0)));
  expect_same(constant_of_shape({0}, zero32), make_tensor<int32_t>({0}, {}));
  expect_same(run_node("ConstantOfShape", {Tensor::from_i64({2})})[0], make_tensor<float>({2}, {0, 0}));
  expect_same(run_node("ConstantOfShape", {Tensor::from_i64({})})[0], Tensor::scalar<float>(0));
  expect_same(constant_of_shape({3}, make_tensor<int64_t>({1}, {7})), Tensor::from_i64({7, 7, 7}));
  Tensor half = Tensor::empty(DType::kF16, {1});
  half.data<Half>()[0] = Half{f32_to_f16(1.5f)};
  Tensor h = constant_of_shape({2, 2}, half);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.to_double(3), 1.5);
  EXPECT_TRUE(constant_of_shape({5}, make_tensor<bool>({1}, {true})).data<bool>()[4]);
  EXPECT_THROW(run_node("ConstantOfShape", {Tensor::from_i64({-1})}), ShapeError);
}

TEST(RangeKernel, OnnxCases) {
  expect_same(run_node("Range", range_inputs<float>(1, 5, 2))[0], make_tensor<float>({2}, {1, 3}));
  expect_same(run_node("Range", range_inputs<int32_t>(10, 6, -3))[0], make_tensor<int32_t>({2}, {10, 7}));
  for (DType t : {DType::kF16, DType::kBF16}) {
    const auto scalar = [t](float v) {
      Tensor s = Tensor::empty(t, {});
      s.data<uint16_t>()[0] = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      return s;
    };
    Tensor y = run_node("Range", {scalar(1), scalar(5), scalar(2)})[0];
    ASSERT_EQ(y.dims(), (std::vector<int64_t>{2}));
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.to_double(0), 1.0);
    EXPECT_EQ(y.to_double(1), 3.0);
  }
  expect_same(run_node("Range", range_inputs<int64_t>(0, 7, 3))[0], Tensor::from_i64({0, 3, 6}));
  expect_same(run_node("Range", range_inputs<double>(0, -1, -0.25))[0],
              make_tensor<double>({4}, {0, -0.25, -0.5, -0.75}));
  EXPECT_EQ(run_node("Range", range_inputs<int64_t>(5, 1, 1))[0].numel(), 0);
  EXPECT_THROW(run_node("Range", range_inputs<int64_t>(0, 1, 0)), ShapeError);
  std::vector<Tensor> mixed = range_inputs<int64_t>(0, 1, 1);
  mixed[1] = Tensor::scalar<int32_t>(1);
  EXPECT_THROW(run_node("Range", mixed), ShapeError);
}

// numpy.triu / numpy.tril over the last two dims.
Tensor reference_trilu(const Tensor& x, int64_t k, bool upper) {
  Tensor y = x.clone();
  const int64_t rows = x.dim(-2), cols = x.dim(-1);
  const size_t es = dtype_size(x.dtype());
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t i = (e / cols) % rows, j = e % cols;
    if (upper ? j - i < k : j - i > k) std::memset(static_cast<char*>(y.raw()) + e * es, 0, es);
  }
  return y;
}

TEST(TriluKernel, OnnxCasesBothTrianglesAndDTypes) {
  for (DType t : testing::kAllDTypes) {
    for (const std::vector<int64_t>& dims :
         {std::vector<int64_t>{4, 5}, std::vector<int64_t>{2, 3, 3}, std::vector<int64_t>{3, 1, 5},
          std::vector<int64_t>{0, 5}}) {
      Tensor x = iota(t, dims);
      for (bool upper : {true, false}) {
        std::map<std::string, Attribute> attrs{{"upper", Attribute::of_int(upper)}};
        expect_same(run_node("Trilu", {x}, attrs)[0], reference_trilu(x, 0, upper));
        for (int64_t k : {-7, -1, 1, 2, 6})
          expect_same(run_node("Trilu", {x, Tensor::scalar<int64_t>(k)}, attrs)[0],
                      reference_trilu(x, k, upper));
      }
    }
  }
  EXPECT_THROW(run_node("Trilu", {iota(DType::kF32, {4})}), ShapeError);
}

}  // namespace
}  // namespace trainrt
