// If's gradient (an If over the branches' own joint graphs) against f64 finite differences, down
// each branch: one branch reads both enclosing values, the other one of them (zeros for the other).
#include <gtest/gtest.h>

#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;

constexpr int32_t kF64 = kDouble;

// loss = ReduceSum(If(cond, then: Tanh(a) * b, else: a * a + 1) * w): a (2, 3), b (3), w (2, 3).
std::shared_ptr<Graph> if_loss_graph() {
  onnx::GraphProto then_branch;
  then_branch.node.push_back(make_node("Tanh", {"a"}, {"ta"}, "tanh"));
  then_branch.node.push_back(make_node("Mul", {"ta", "b"}, {"t"}, "mul"));
  then_branch.output.push_back(tensor_info("t", kF64, {"2", "3"}));
  onnx::GraphProto else_branch;
  else_branch.node.push_back(make_node("Mul", {"a", "a"}, {"aa"}, "square"));
  else_branch.node.push_back(make_node("Add", {"aa", "one"}, {"e"}, "plus_one"));
  else_branch.output.push_back(tensor_info("e", kF64, {"2", "3"}));
  onnx::TensorProto one;
  one.name = "one";
  one.data_type = kF64;
  one.double_data = {1.0};
  else_branch.initializer.push_back(one);
  onnx::GraphProto g;
  g.input = {tensor_info("cond", kBool, {}), tensor_info("a", kF64, {"2", "3"}), tensor_info("b", kF64, {"3"}),
             tensor_info("w", kF64, {"2", "3"})};
  g.node.push_back(make_node("If", {"cond"}, {"y"}, "if",
                             {attr_graph("then_branch", then_branch), attr_graph("else_branch", else_branch)}));
  g.node.push_back(make_node("Mul", {"y", "w"}, {"yw"}, "weigh"));
  g.node.push_back(make_node("ReduceSum", {"yw"}, {"loss"}, "loss", {attr_int("keepdims", 0)}));
  g.output.push_back(tensor_info("loss", kF64, {}));
  return std::shared_ptr<Graph>(import_onnx_bytes(encode(make_model(g, 17))));
}

TEST(ControlFlowGradients, IfMatchesFiniteDifferencesDownEachBranch) {
  WorstErrors worst;
  for (bool cond : {true, false}) {
    const std::vector<Tensor> inputs = {Tensor::scalar<bool>(cond), random_f64({2, 3}, 80), random_f64({3}, 81),
                                        random_f64({2, 3}, 82)};
    worst.record(cond ? "If (then)" : "If (else)", expect_graph_gradients_match(if_loss_graph, inputs, {1, 2}));
  }
}

}  // namespace
}  // namespace trainrt
