// If, Loop and Scan run by a Session: outputs against hand-computed references, dims known only
// when the body runs, zero iterations, reversed and inner-axis scans, and errors naming the node.
#include "trainrt/runtime/control_flow_kernels.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;

std::shared_ptr<Graph> import(const onnx::GraphProto& g) {
  return std::shared_ptr<Graph>(import_onnx_bytes(encode(make_model(g, 17))));
}

// y = Relu(If(cond, then: Concat(x, -x) on axis 0 (2n, 2), else: x (n, 2))) - the If's dims depend
// on the branch taken, so only the kernel can size them.
onnx::GraphProto branchy_graph() {
  onnx::GraphProto then_branch;
  then_branch.node.push_back(make_node("Neg", {"x"}, {"nx"}, "neg"));
  then_branch.node.push_back(make_node("Concat", {"x", "nx"}, {"both"}, "concat", {attr_int("axis", 0)}));
  then_branch.output.push_back(tensor_info("both", kFloat, {"?", "2"}));
  onnx::GraphProto else_branch;
  else_branch.node.push_back(make_node("Identity", {"x"}, {"same"}, "same"));
  else_branch.output.push_back(tensor_info("same", kFloat, {"n", "2"}));
  onnx::GraphProto g;
  g.input = {unranked_info("cond", kBool), tensor_info("x", kFloat, {"n", "2"})};
  g.node.push_back(make_node("If", {"cond"}, {"chosen"}, "if",
                             {attr_graph("then_branch", then_branch), attr_graph("else_branch", else_branch)}));
  g.node.push_back(make_node("Relu", {"chosen"}, {"y"}, "relu"));
  g.output.push_back(tensor_info("y", kFloat, {"?", "2"}));
  return g;
}

TEST(ControlFlowKernels, IfRunsTheBranchItsConditionPicks) {
  Session session(import(branchy_graph()));
  const Tensor x = make_tensor<float>({2, 2}, {1, -2, 3, -4});
  for (int round = 0; round < 2; ++round) {  // plans reused, both ways
    expect_close(session.run({Tensor::scalar<bool>(true), x})[0],
                 make_tensor<float>({4, 2}, {1, 0, 3, 0, 0, 2, 0, 4}));
    expect_close(session.run({Tensor::scalar<bool>(false), x})[0], make_tensor<float>({2, 2}, {1, 0, 3, 0}));
  }
  const Tensor x3 = make_tensor<float>({3, 2}, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(session.run({Tensor::scalar<bool>(true), x3})[0].dims(), (std::vector<int64_t>{6, 2}));
}

// Loop(M, cond, s) with body: s' = s + x[i] (x an enclosing value), scan out s', cond' = i < stop.
onnx::GraphProto sum_loop_graph() {
  onnx::GraphProto body;
  body.input = {tensor_info("i", kInt64, {}), tensor_info("c_in", kBool, {}), tensor_info("s_in", kFloat, {"2"})};
  body.node.push_back(make_node("Gather", {"x", "i"}, {"row"}, "row", {attr_int("axis", 0)}));
  body.node.push_back(make_node("Add", {"s_in", "row"}, {"s_out"}, "add"));
  body.node.push_back(make_node("Less", {"i", "stop"}, {"c_out"}, "less"));
  body.node.push_back(make_node("Identity", {"s_out"}, {"scan"}, "scan"));
  body.output = {tensor_info("c_out", kBool, {}), tensor_info("s_out", kFloat, {"2"}),
                 tensor_info("scan", kFloat, {"2"})};
  onnx::GraphProto g;
  g.input = {tensor_info("m", kInt64, {}), tensor_info("s", kFloat, {"2"}), tensor_info("x", kFloat, {"?", "?"}),
             tensor_info("stop", kInt64, {})};
  g.node.push_back(make_node("Loop", {"m", "", "s"}, {"s_final", "partial"}, "loop", {attr_graph("body", body)}));
  g.output = {tensor_info("s_final", kFloat, {"2"}), tensor_info("partial", kFloat, {"?", "2"})};
  return g;
}

TEST(ControlFlowKernels, LoopCarriesStacksAndStopsOnItsCondition) {
  Session session(import(sum_loop_graph()));
  const Tensor x = make_tensor<float>({4, 2}, {1, 10, 2, 20, 3, 30, 4, 40});
  const Tensor s = make_tensor<float>({2}, {0.5f, 0.5f});
  // Runs i = 0, 1, 2: the condition i < 2 is false after i = 2.
  std::vector<Tensor> out = session.run({Tensor::scalar<int64_t>(10), s, x, Tensor::scalar<int64_t>(2)});
  expect_close(out[0], make_tensor<float>({2}, {6.5f, 60.5f}));
  expect_close(out[1], make_tensor<float>({3, 2}, {1.5f, 10.5f, 3.5f, 30.5f, 6.5f, 60.5f}));
  // M bounds it: two iterations.
  out = session.run({Tensor::scalar<int64_t>(2), s, x, Tensor::scalar<int64_t>(9)});
  expect_close(out[1], make_tensor<float>({2, 2}, {1.5f, 10.5f, 3.5f, 30.5f}));
  // No iteration: the initial value, copied (not the caller's memory), and an empty scan output.
  Tensor mine = s.clone();
  out = session.run({Tensor::scalar<int64_t>(0), mine, x, Tensor::scalar<int64_t>(9)});
  mine.data<float>()[0] = 99.f;
  expect_close(out[0], make_tensor<float>({2}, {0.5f, 0.5f}));
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{0, 2}));
}

// Scan over axis 1 of x (2, T), reversed, with a running sum state (2); the scan output stacks the
// sums along output axis 1: a reversed cumulative sum, (2, T).
onnx::GraphProto reverse_cumsum_graph() {
  onnx::GraphProto body;
  body.input = {tensor_info("acc", kFloat, {"2"}), tensor_info("col", kFloat, {"2"})};
  body.node.push_back(make_node("Add", {"acc", "col"}, {"next"}, "add"));
  body.node.push_back(make_node("Identity", {"next"}, {"out"}, "out"));
  body.output = {tensor_info("next", kFloat, {"2"}), tensor_info("out", kFloat, {"2"})};
  onnx::GraphProto g;
  g.input = {tensor_info("init", kFloat, {"2"}), tensor_info("x", kFloat, {"2", "t"})};
  g.node.push_back(make_node("Scan", {"init", "x"}, {"total", "sums"}, "scan",
                             {attr_graph("body", body), attr_int("num_scan_inputs", 1),
                              attr_ints("scan_input_axes", {1}), attr_ints("scan_input_directions", {1}),
                              attr_ints("scan_output_axes", {1})}));
  g.output = {tensor_info("total", kFloat, {"2"}), tensor_info("sums", kFloat, {"2", "t"})};
  return g;
}

TEST(ControlFlowKernels, ScanAlongAnInnerAxisInReverse) {
  Session session(import(reverse_cumsum_graph()));
  const Tensor x = make_tensor<float>({2, 3}, {1, 2, 3, 10, 20, 30});
  std::vector<Tensor> out = session.run({Tensor::zeros(DType::kF32, {2}), x});
  expect_close(out[0], make_tensor<float>({2}, {6, 60}));
  // Slices are taken last to first, and stacked in the order made (scan_output_directions 0).
  expect_close(out[1], make_tensor<float>({2, 3}, {3, 5, 6, 30, 50, 60}));
  out = session.run({Tensor::zeros(DType::kF32, {2}), Tensor::zeros(DType::kF32, {2, 0})});
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{2, 0}));
}

TEST(ControlFlowKernels, ErrorsNameTheNodeAndTheBody) {
  Session session(import(branchy_graph()));
  try {
    session.run({make_tensor<bool>({2}, {true, false}), make_tensor<float>({1, 2}, {1, 2})});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'if' (If): the condition is"), std::string::npos) << e.what();
  }
  onnx::GraphProto g = sum_loop_graph();
  Session loop(import(g));
  try {  // x has 3 columns: the body's Add of (2) and (3) fails
    loop.run({Tensor::scalar<int64_t>(1), Tensor::zeros(DType::kF32, {2}), Tensor::zeros(DType::kF32, {4, 3}),
              Tensor::scalar<int64_t>(5)});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 'loop' (Loop): body"), std::string::npos) << what;
    EXPECT_NE(what.find("'add' (Add)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace trainrt
