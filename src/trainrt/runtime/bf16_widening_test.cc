// widen_bf16_without_kernel: a bf16 node with no bf16 kernel runs in f32 between casts, gives the
// f32 kernel's result rounded once, and leaves nodes that have a bf16 kernel alone.
#include "trainrt/runtime/bf16_widening.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/cpu_kernels.h"
#include "trainrt/kernels/cpu/elementwise_test_util.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

// The CPU table's kernels of `op` for the given dtypes only.
void copy_kernels(KernelTable& t, const std::string& op, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) t.add("", op, d, *cpu_kernel_table().find("", op, d));
}

// y = Relu(Softmax(x)), all bf16: x (2, 5).
std::shared_ptr<Graph> softmax_relu_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kBF16, Shape::of({2, 5}));
  Node* softmax = g->add_node("Softmax", {x}, {"p"});
  softmax->output(0)->dtype = DType::kBF16;
  Node* relu = g->add_node("Relu", {softmax->output(0)}, {"y"});
  relu->output(0)->dtype = DType::kBF16;
  g->add_output(relu->output(0));
  return g;
}

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.to_double(i);
  return v;
}

TEST(Bf16Widening, ANodeWithoutABf16KernelRunsInF32BetweenCasts) {
  KernelTable table;  // Softmax in f32 only; Relu in bf16; Cast for every dtype
  copy_kernels(table, "Softmax", {DType::kF32});
  copy_kernels(table, "Relu", {DType::kBF16});
  table.add("", "Cast", DType::kUndefined, *cpu_kernel_table().find("", "Cast", DType::kF32));
  auto g = softmax_relu_graph();
  EXPECT_EQ(widen_bf16_without_kernel(*g, table), std::vector<std::string>{g->find_value("p")->producer->name()});
  // Cast(x -> f32), Softmax in f32, Cast(-> bf16) into the same value p, Relu untouched.
  std::vector<std::string> ops;
  for (const Node* n : g->topological_order()) ops.push_back(n->op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"Cast", "Softmax", "Cast", "Relu"}));
  const Value* p = g->find_value("p");
  EXPECT_EQ(p->dtype, DType::kBF16);
  EXPECT_EQ(p->producer->input(0)->producer->input(0)->dtype, DType::kF32);
  EXPECT_TRUE(widen_bf16_without_kernel(*g, table).empty());  // idempotent

  // The result is the f32 softmax of the bf16 values, rounded once to bf16.
  const Tensor x = testing::random_of(DType::kBF16, {2, 5}, 3);
  SessionOptions options;
  options.kernels = &table;
  Session session(g, options);
  const Tensor y = session.run({x})[0];
  ASSERT_EQ(y.dtype(), DType::kBF16);
  const Tensor wide = run_node("Softmax", {testing::from_doubles(DType::kF32, {2, 5}, doubles_of(x))})[0];
  testing::expect_values(y, doubles_of(testing::from_doubles(DType::kBF16, {2, 5}, doubles_of(wide))), 0, 0,
                         "softmax widened");
}

TEST(Bf16Widening, NodesWithBf16KernelsAndF32NodesAreLeftAlone) {
  auto g = softmax_relu_graph();  // the CPU table has bf16 Softmax and Relu
  EXPECT_TRUE(widen_bf16_without_kernel(*g, cpu_kernel_table()).empty());
  EXPECT_EQ(g->num_nodes(), 2);
}

}  // namespace
}  // namespace trainrt
