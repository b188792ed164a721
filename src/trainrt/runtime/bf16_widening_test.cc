// bf16 / f16 nodes the engine cannot run in that dtype compute in f32 between casts
// (autodiff/low_precision.h), give the f32 result rounded once, and nodes that can are left alone:
//   widen_bf16_without_kernel: no kernel takes the dtype (at session build);
//   LowPrecisionCompute: the schema refuses the dtype (a forward graph straight from capture);
//   the gradient builder: a gradient op's schema refuses it (GatherGrad of a bf16 embedding).
#include "trainrt/runtime/bf16_widening.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "trainrt/autodiff/gradient_builder.h"
#include "trainrt/passes/low_precision_compute.h"
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

// Kernels that dispatch on the dtype inside declare the dtypes they take (kernels/kernel.h), so a
// bf16 / f16 node whose kernel refuses its dtype is widened like one with no kernel at all. CumSum
// takes f32, f64, i32, i64: its bf16 / f16 sums run in f32, each output rounded once.
TEST(Bf16Widening, ACumSumOf16BitFloatsRunsInF32AndRoundsOnce) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    auto g = std::make_shared<Graph>();
    g->set_opset("", 18);
    Value* x = g->add_input("x", t, Shape::of({2, 6}));
    Node* cumsum = g->add_node("CumSum", {x, g->add_initializer("axis", Tensor::scalar<int64_t>(1))}, {"y"});
    cumsum->output(0)->dtype = t;
    g->add_output(cumsum->output(0));
    const Tensor xs = testing::random_of(t, {2, 6}, 11);
    const Tensor y = Session(g).run({xs})[0];
    ASSERT_EQ(y.dtype(), t);
    EXPECT_EQ(g->find_value("y")->producer->input(0)->producer->op_type(), "CumSum");  // y = Cast(CumSum in f32)
    const Tensor wide = run_node("CumSum", {testing::from_doubles(DType::kF32, {2, 6}, doubles_of(xs)),
                                            Tensor::scalar<int64_t>(1)})[0];
    testing::expect_values(y, doubles_of(testing::from_doubles(t, {2, 6}, doubles_of(wide))), 0, 0,
                           std::string("cumsum widened, ") + std::string(dtype_name(t)));
  }
}

// loss = ReduceSum(Pad(x, reflect, 2 on each side of the last axis) * w), x (2, 3), w (2, 7), of
// dtype t; returns the graph with the gradient of x built, and that gradient's value.
std::pair<std::shared_ptr<Graph>, Value*> reflect_pad_loss(DType t) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", t, Shape::of({2, 3}));
  Value* w = g->add_input("w", t, Shape::of({2, 7}));
  Node* pad = g->add_node("Pad", {x, g->add_initializer("pads", Tensor::from_i64({0, 2, 0, 2}))}, {"padded"});
  pad->set_attr("mode", Attribute::of_string("reflect"));
  Node* mul = g->add_node("Mul", {pad->output(0), w}, {"weighted"});
  Node* sum = g->add_node("ReduceSum", {mul->output(0)}, {"loss"});
  sum->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(sum->output(0));
  infer_graph_shapes(*g);
  const GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"x"}});
  return {g, g->find_value(r.grad_of.at("x"))};
}

Tensor output_of(const Graph& g, const std::vector<Tensor>& outputs, const Value* v) {
  const auto at = std::find(g.outputs().begin(), g.outputs().end(), v);
  EXPECT_NE(at, g.outputs().end());
  return outputs[static_cast<size_t>(at - g.outputs().begin())];
}

// The gradient of a reflect Pad, PadGrad, takes f32 and f64 dY: in a 16-bit model it runs in f32
// between casts, summing the dY elements read from the same x element in f32 and rounding once.
// dY = w exactly in every dtype, so dX is the f32 model's dX rounded once.
TEST(Bf16Widening, TheGradientOfA16BitReflectPadRunsInF32AndRoundsOnce) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::string what = std::string("dX of a reflect pad, ") + std::string(dtype_name(t));
    auto [g, dx] = reflect_pad_loss(t);
    EXPECT_EQ(dx->dtype, t) << what;
    const Tensor x = testing::random_of(t, {2, 3}, 5), w = testing::random_of(t, {2, 7}, 6);
    const Tensor got = output_of(*g, Session(g).run({x, w}), dx);
    bool pad_grad_in_f32 = false;
    for (const Node* n : g->nodes()) pad_grad_in_f32 |= n->op_type() == "PadGrad" && n->input(0)->dtype == DType::kF32;
    EXPECT_TRUE(pad_grad_in_f32) << what;

    auto [wide, wide_dx] = reflect_pad_loss(DType::kF32);
    const std::vector<Tensor> wide_inputs = {testing::from_doubles(DType::kF32, {2, 3}, doubles_of(x)),
                                             testing::from_doubles(DType::kF32, {2, 7}, doubles_of(w))};
    const Tensor reference = output_of(*wide, Session(wide).run(wide_inputs), wide_dx);
    testing::expect_values(got, doubles_of(testing::from_doubles(t, {2, 3}, doubles_of(reference))), 0, 0, what);
  }
}

std::vector<std::string> op_types(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node* n : g.topological_order()) ops.push_back(n->op_type());
  return ops;
}

TEST(LowPrecisionCompute, ANodeWhoseSchemaRefusesBf16RunsInF32BetweenCastsAndTheGraphInfers) {
  // y = BatchNormalization(x, scale, bias, mean, var) in inference form, all bf16, no dtype stored
  // past the inputs (as capture hands it over): BatchNormalization takes f32 and f64 only.
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kBF16, Shape::of({2, 3, 2, 2}));
  std::vector<Value*> inputs = {x};
  for (const char* name : {"scale", "bias", "mean", "var"}) inputs.push_back(g->add_input(name, DType::kBF16, Shape::of({3})));
  Node* bn = g->add_node("BatchNormalization", inputs, {"bn"});
  Node* relu = g->add_node("Relu", {bn->output(0)}, {"y"});
  g->add_output(relu->output(0));
  EXPECT_THROW(infer_graph_shapes(*g), ShapeError);

  EXPECT_TRUE(LowPrecisionCompute().apply(*g));
  infer_graph_shapes(*g);
  EXPECT_EQ(op_types(*g), (std::vector<std::string>{"Cast", "Cast", "Cast", "Cast", "Cast", "BatchNormalization",
                                                    "Cast", "Relu"}));
  EXPECT_EQ(g->find_value("bn")->dtype, DType::kBF16);  // the same value, its readers kept
  EXPECT_EQ(g->find_value("bn")->producer->input(0)->dtype, DType::kF32);
  EXPECT_EQ(g->find_value("y")->dtype, DType::kBF16);
  EXPECT_FALSE(LowPrecisionCompute().apply(*g));  // idempotent

  std::vector<Tensor> feeds = {testing::random_of(DType::kBF16, {2, 3, 2, 2}, 1)};
  for (int i = 0; i < 4; ++i) feeds.push_back(testing::random_of(DType::kBF16, {3}, 2 + i));
  feeds[4] = testing::from_doubles(DType::kBF16, {3}, {0.5, 1.0, 2.0});  // variances > 0
  const Tensor y = Session(g).run(feeds)[0];
  std::vector<Tensor> wide;
  for (const Tensor& t : feeds) wide.push_back(testing::from_doubles(DType::kF32, t.dims(), doubles_of(t)));
  const Tensor reference = run_node("BatchNormalization", wide)[0];
  std::vector<double> expected = doubles_of(testing::from_doubles(DType::kBF16, {2, 3, 2, 2}, doubles_of(reference)));
  for (double& v : expected) v = v > 0 ? v : 0;
  testing::expect_values(y, expected, 0, 0, "batch norm widened, then relu");
}

TEST(LowPrecisionCompute, TheGradientOfABf16EmbeddingIsABf16GatherGradSummedInF32) {
  // loss = ReduceSum(Gather(w, ids)): dW = scatter-add of ones over the ids' rows, by GatherGrad's bf16
  // kernel, which sums each row in f32 and rounds once (kernels/cpu/bf16_kernels_test.cc): no widening.
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* w = g->add_input("w", DType::kBF16, Shape::of({5, 2}));
  Value* ids = g->add_input("ids", DType::kI64, Shape::of({4}));
  Node* gather = g->add_node("Gather", {w, ids}, {"rows"});
  Node* sum = g->add_node("ReduceSum", {gather->output(0)}, {"loss"});
  sum->set_attr("keepdims", Attribute::of_int(0));
  g->add_output(sum->output(0));
  infer_graph_shapes(*g);
  const GradientResult r = build_gradients(*g, {.loss = "loss", .wrt = {"w"}});
  const Value* dw = g->find_value(r.grad_of.at("w"));
  EXPECT_EQ(dw->dtype, DType::kBF16);
  bool gather_grad_in_bf16 = false;
  for (const Node* n : g->nodes()) {
    gather_grad_in_bf16 |= n->op_type() == "GatherGrad" && n->input(2)->dtype == DType::kBF16;
    EXPECT_NE(n->op_type(), "Cast") << "no widening around the gradient";
  }
  EXPECT_TRUE(gather_grad_in_bf16);

  const std::vector<Tensor> out = Session(g).run({testing::random_of(DType::kBF16, {5, 2}, 7), Tensor::from_i64({0, 3, 3, 1})});
  const size_t at = static_cast<size_t>(std::find_if(g->outputs().begin(), g->outputs().end(),
                                                     [&](const Value* v) { return v == dw; }) - g->outputs().begin());
  ASSERT_LT(at, out.size());
  testing::expect_values(out[at], {1, 1, 1, 1, 0, 0, 2, 2, 0, 0}, 0, 0, "dW: row 3 twice, rows 2 and 4 never");
}

}  // namespace
}  // namespace trainrt
