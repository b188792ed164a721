// If's gradient (an If over the branches' own joint graphs) against f64 finite differences, down
// each branch: one branch reads both enclosing values, the other one of them (zeros for the other);
// Scan's (a reverse Scan over its body's joint graph) over axes and directions; Loop's (a reverse
// Loop reading the recomputed history) bounded by M, stopped by its condition, and run zero times.
#include <gtest/gtest.h>

#include <functional>
#include <tuple>

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

// loss = ReduceSum(h_T * u) + ReduceSum(ys * v) over Scan(h0, x) with body
//   h' = Tanh(h * w + x_t), y_t = h' * h   (w read from the enclosing graph)
// x scanned along `axis` (0 or 1 of (T, 3) or (3, T) data), in `direction`, ys stacked along
// `out_axis` in `out_direction`.
std::function<std::shared_ptr<Graph>()> scan_loss_graph(int64_t axis, int64_t direction, int64_t out_axis,
                                                        int64_t out_direction) {
  return [=] {
    onnx::GraphProto body;
    body.input = {tensor_info("h", kF64, {"3"}), tensor_info("x_t", kF64, {"3"})};
    body.node.push_back(make_node("Mul", {"h", "w"}, {"hw"}, "hw"));
    body.node.push_back(make_node("Add", {"hw", "x_t"}, {"pre"}, "pre"));
    body.node.push_back(make_node("Tanh", {"pre"}, {"h_next"}, "tanh"));
    body.node.push_back(make_node("Mul", {"h_next", "h"}, {"y"}, "y"));
    body.output = {tensor_info("h_next", kF64, {"3"}), tensor_info("y", kF64, {"3"})};
    onnx::GraphProto g;
    const std::vector<std::string> x_dims = axis == 0 ? std::vector<std::string>{"4", "3"} : std::vector<std::string>{"3", "4"};
    const std::vector<std::string> y_dims = out_axis == 0 ? std::vector<std::string>{"4", "3"} : std::vector<std::string>{"3", "4"};
    g.input = {tensor_info("h0", kF64, {"3"}), tensor_info("x", kF64, x_dims), tensor_info("w", kF64, {"3"}),
               tensor_info("u", kF64, {"3"}), tensor_info("v", kF64, y_dims)};
    g.node.push_back(make_node("Scan", {"h0", "x"}, {"h_last", "ys"}, "scan",
                               {attr_graph("body", body), attr_int("num_scan_inputs", 1),
                                attr_ints("scan_input_axes", {axis}), attr_ints("scan_input_directions", {direction}),
                                attr_ints("scan_output_axes", {out_axis}),
                                attr_ints("scan_output_directions", {out_direction})}));
    g.node.push_back(make_node("Mul", {"h_last", "u"}, {"hu"}, "hu"));
    g.node.push_back(make_node("ReduceSum", {"hu"}, {"l1"}, "l1", {attr_int("keepdims", 0)}));
    g.node.push_back(make_node("Mul", {"ys", "v"}, {"yv"}, "yv"));
    g.node.push_back(make_node("ReduceSum", {"yv"}, {"l2"}, "l2", {attr_int("keepdims", 0)}));
    g.node.push_back(make_node("Add", {"l1", "l2"}, {"loss"}, "loss"));
    g.output.push_back(tensor_info("loss", kF64, {}));
    return std::shared_ptr<Graph>(import_onnx_bytes(encode(make_model(g, 17))));
  };
}

TEST(ControlFlowGradients, ScanMatchesFiniteDifferences) {
  WorstErrors worst;
  for (int64_t axis : {0, 1})
    for (int64_t direction : {0, 1})
      for (int64_t out_direction : {0, 1}) {
        const int64_t out_axis = 1 - axis;
        const std::vector<int64_t> x_dims = axis == 0 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
        const std::vector<int64_t> y_dims = out_axis == 0 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
        const std::vector<Tensor> inputs = {random_f64({3}, 90), random_f64(x_dims, 91), random_f64({3}, 92),
                                            random_f64({3}, 93), random_f64(y_dims, 94)};
        worst.record(fmt("Scan axis ", axis, " dir ", direction, " out dir ", out_direction),
                     expect_graph_gradients_match(scan_loss_graph(axis, direction, out_axis, out_direction), inputs,
                                                  {0, 1, 2}));
      }
}

// loss = ReduceSum(s_final * u) + ReduceSum(ys * v) over Loop(m, s0) with body
//   s' = Tanh(s * w + Gather(x, i)), y = s' * s, cond' = i < stop   (x, w, stop enclosing values)
std::shared_ptr<Graph> loop_loss_graph() {
  onnx::GraphProto body;
  body.input = {tensor_info("i", kInt64, {}), tensor_info("c", kBool, {}), tensor_info("s", kF64, {"3"})};
  body.node.push_back(make_node("Gather", {"x", "i"}, {"x_i"}, "row", {attr_int("axis", 0)}));
  body.node.push_back(make_node("Mul", {"s", "w"}, {"sw"}, "sw"));
  body.node.push_back(make_node("Add", {"sw", "x_i"}, {"pre"}, "pre"));
  body.node.push_back(make_node("Tanh", {"pre"}, {"s_next"}, "tanh"));
  body.node.push_back(make_node("Mul", {"s_next", "s"}, {"y"}, "y"));
  body.node.push_back(make_node("Less", {"i", "stop"}, {"c_next"}, "less"));
  body.output = {tensor_info("c_next", kBool, {}), tensor_info("s_next", kF64, {"3"}), tensor_info("y", kF64, {"3"})};
  onnx::GraphProto g;
  g.input = {tensor_info("m", kInt64, {}), tensor_info("stop", kInt64, {}), tensor_info("s0", kF64, {"3"}),
             tensor_info("x", kF64, {"5", "3"}), tensor_info("w", kF64, {"3"}), tensor_info("u", kF64, {"3"}),
             tensor_info("v", kF64, {"?", "3"})};
  g.node.push_back(make_node("Loop", {"m", "", "s0"}, {"s_final", "ys"}, "loop", {attr_graph("body", body)}));
  g.node.push_back(make_node("Mul", {"s_final", "u"}, {"su"}, "su"));
  g.node.push_back(make_node("ReduceSum", {"su"}, {"l1"}, "l1", {attr_int("keepdims", 0)}));
  g.node.push_back(make_node("Mul", {"ys", "v"}, {"yv"}, "yv"));
  g.node.push_back(make_node("ReduceSum", {"yv"}, {"l2"}, "l2", {attr_int("keepdims", 0)}));
  g.node.push_back(make_node("Add", {"l1", "l2"}, {"loss"}, "loss"));
  g.output.push_back(tensor_info("loss", kF64, {}));
  return std::shared_ptr<Graph>(import_onnx_bytes(encode(make_model(g, 17))));
}

TEST(ControlFlowGradients, LoopMatchesFiniteDifferences) {
  WorstErrors worst;
  // (M, stop, iterations run): bounded by M, stopped by the condition, and none at all.
  for (auto [m, stop, runs] : {std::tuple{5, 10, 5}, std::tuple{5, 2, 3}, std::tuple{0, 10, 0}}) {
    const std::vector<Tensor> inputs = {Tensor::scalar<int64_t>(m), Tensor::scalar<int64_t>(stop), random_f64({3}, 95),
                                        random_f64({5, 3}, 96), random_f64({3}, 97), random_f64({3}, 98),
                                        random_f64({runs, 3}, 99)};
    worst.record(fmt("Loop of ", runs, " iterations"), expect_graph_gradients_match(loop_loss_graph, inputs, {2, 3, 4}));
  }
}

}  // namespace
}  // namespace trainrt
