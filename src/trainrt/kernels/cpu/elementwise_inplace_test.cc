// The in-place pairs the elementwise schemas declare: running a kernel with its output written
// over the declared input gives the same result as separate buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

using testing::random_of;
using Attrs = std::map<std::string, Attribute>;

// Runs op once normally and once with output 0 aliasing input `alias` (which must have the
// output's dtype and dims), and expects identical results.
void expect_inplace_matches(const std::string& op, const std::vector<Tensor>& inputs, int alias,
                            const Attrs& attrs = {}) {
  SCOPED_TRACE(::testing::Message() << op << " output over input " << alias);
  const OpSchema* schema = OpRegistry::global().find("", op);
  ASSERT_NE(schema, nullptr);
  EXPECT_NE(std::find(schema->inplace.begin(), schema->inplace.end(), std::pair<int, int>(alias, 0)),
            schema->inplace.end());
  const Tensor want = run_node(op, inputs, attrs)[0];

  Graph g;
  g.set_opset("", 23);
  std::vector<Value*> values;
  std::vector<Tensor> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    copies.push_back(inputs[i].clone());
    values.push_back(g.add_initializer("in" + std::to_string(i), copies.back()));
  }
  Node* node = g.add_node(op, values, {"out"});
  for (const auto& [name, a] : attrs) node->set_attr(name, a);
  KernelFn kernel = cpu_kernel_table().create(*node);
  std::vector<const Tensor*> in_ptrs;
  for (const Tensor& t : copies) in_ptrs.push_back(&t);
  Tensor& out = copies[static_cast<size_t>(alias)];
  std::vector<Tensor*> out_ptrs = {&out};
  KernelContext ctx;
  ctx.inputs = in_ptrs;
  ctx.outputs = out_ptrs;
  kernel(ctx);
  testing::expect_close(out, want, 0, 0);
}

TEST(ElementwiseInplace, UnaryOverInput) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (int64_t n : {int64_t{37}, int64_t{70001}}) {
      Tensor x = random_of(t, {n}, 1);
      for (const char* op : {"Exp", "Relu", "Tanh", "Gelu", "Neg", "Sigmoid", "Identity"})
        expect_inplace_matches(op, {x}, 0);
      expect_inplace_matches("Clip", {x, testing::from_doubles(t, {}, {-0.5}), testing::from_doubles(t, {}, {0.5})}, 0);
      expect_inplace_matches("Cast", {x}, 0, {{"to", Attribute::of_int(dtype_to_onnx(t))}});
    }
  }
}

TEST(ElementwiseInplace, BinaryOverEitherInput) {
  for (DType t : {DType::kF32, DType::kF16, DType::kI32}) {
    Tensor big = random_of(t, {64, 600}, 2, 1, 3), row = random_of(t, {600}, 3, 1, 3), col = random_of(t, {64, 1}, 4, 1, 3);
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) {
      expect_inplace_matches(op, {big, row}, 0);
      expect_inplace_matches(op, {col, big}, 1);
      expect_inplace_matches(op, {big, big.clone()}, 1);
    }
    for (const char* op : {"Sum", "Max", "Min"}) {
      expect_inplace_matches(op, {big, row, col}, 0);
      expect_inplace_matches(op, {row, big}, 1);
    }
  }
  Tensor c = random_of(DType::kBool, {64, 1}, 5), x = random_of(DType::kF32, {64, 600}, 6), y = random_of(DType::kF32, {600}, 7);
  expect_inplace_matches("Where", {c, x, y}, 1);
  expect_inplace_matches("Where", {c, y, x}, 2);
  Tensor b = random_of(DType::kBool, {64, 600}, 8);
  expect_inplace_matches("And", {b, random_of(DType::kBool, {600}, 9)}, 0);
}

}  // namespace
}  // namespace trainrt
