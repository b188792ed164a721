// ZeroInputElimination: the IR before and after on a backward's pattern (an absent output gradient
// summed into the loss's, then through a product), what it must leave alone, and the same numbers
// from the simplified graph as from the original one with zeros fed.
#include "trainrt/passes/zero_input_elimination.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::random_tensor;

// dlogits = Sum(dz (absent: zeros), dpath), both (2, 3, 5); dx = dlogits w (2, 3, 4);
// dw = Flatten(dlogits)^T Flatten(x) (5, 4); db = Add(dz, bias) (broadcast: kept);
// dr = Relu(dz) (not in the table: kept); dz itself is also a graph output.
std::shared_ptr<Graph> backward_like_graph() {
  auto g = testing::graph_with_opsets();
  Value* dz = g->add_input("dz", DType::kF32, Shape({2, 3, 5}));
  Value* dpath = g->add_input("dpath", DType::kF32, Shape({2, 3, 5}));
  Value* w = g->add_input("w", DType::kF32, Shape({5, 4}));
  Value* x = g->add_input("x", DType::kF32, Shape({2, 3, 4}));
  Value* bias = g->add_input("bias", DType::kF32, Shape({5}));
  Value* dlogits = g->add_node("Sum", {dz, dpath}, {"dlogits"})->output(0);
  g->add_output(g->add_node("FusedMatMul", {dlogits, w}, {"dx"}, kTrainrtDomain)->output(0));
  Node* flat_dy = g->add_node("Flatten", {dlogits}, {"flat_dy"});
  flat_dy->set_attr("axis", Attribute::of_int(2));
  Node* flat_x = g->add_node("Flatten", {x}, {"flat_x"});
  flat_x->set_attr("axis", Attribute::of_int(2));
  Node* gemm = g->add_node("Gemm", {flat_dy->output(0), flat_x->output(0)}, {"dw"});
  gemm->set_attr("transA", Attribute::of_int(1));
  g->add_output(gemm->output(0));
  // The zero's own path to an output: two products of it, summed with nothing else.
  Value* dz_w = g->add_node("FusedMatMul", {dz, w}, {"dz_w"}, kTrainrtDomain)->output(0);
  g->add_output(g->add_node("Sum", {dz_w, dz_w}, {"dz_twice"})->output(0));
  g->add_output(g->add_node("Add", {dz, bias}, {"db"})->output(0));
  g->add_output(g->add_node("Relu", {dz}, {"dr"})->output(0));
  g->add_output(dz);
  infer_graph_shapes(*g);
  return g;
}

std::vector<Tensor> inputs() {
  return {Tensor::zeros(DType::kF32, {2, 3, 5}), random_tensor({2, 3, 5}, 1), random_tensor({5, 4}, 2),
          random_tensor({2, 3, 4}, 3), random_tensor({5}, 4)};
}

TEST(ZeroInputElimination, DropsTheZeroOperandOfASumAndTheWorkOnlyItFed) {
  auto g = backward_like_graph();
  EXPECT_TRUE(ZeroInputElimination({"dz"}).apply(*g));
  verify(*g);
  // Sum(dz, dpath) is gone (dpath is read directly); Sum(dz_w, dz_w) of zeros stays, since a
  // graph output needs it, and so does its product.
  ASSERT_EQ(count(*g, "Sum"), 1);
  EXPECT_EQ(g->find_value("dz_twice")->producer->op_type(), "Sum");
  EXPECT_EQ(g->find_value("flat_dy")->producer->input(0)->name, "dpath");
  EXPECT_EQ(g->find_value("dx")->producer->input(0)->name, "dpath");
  EXPECT_EQ(count(*g, "FusedMatMul"), 2);
  EXPECT_EQ(count(*g, "Add"), 1);   // a broadcast: Add(dz, bias) is bias, in another shape
  EXPECT_EQ(count(*g, "Relu"), 1);  // Relu is not in the table
  EXPECT_EQ(g->inputs().size(), 5u);
  EXPECT_EQ(g->outputs().size(), 6u);
}

TEST(ZeroInputElimination, SimplifiedGraphComputesWhatTheOriginalComputesFromZeros) {
  auto original = backward_like_graph();
  auto simplified = backward_like_graph();
  ASSERT_TRUE(ZeroInputElimination({"dz"}).apply(*simplified));
  const auto expected = Session(original).run(inputs());
  const auto got = Session(simplified).run(inputs());
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], 0.0, 0.0);
}

TEST(ZeroInputElimination, AGraphOutputTheSumMadeBecomesAnIdentity) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* a = g->add_input("a", DType::kF32, Shape({3}));
  Value* b = g->add_input("b", DType::kF32, Shape({3}));
  g->add_output(g->add_node("Add", {a, b}, {"s"})->output(0));
  infer_graph_shapes(*g);
  EXPECT_TRUE(ZeroInputElimination({"a"}).apply(*g));
  ASSERT_EQ(g->num_nodes(), 1);
  EXPECT_EQ(g->outputs()[0]->name, "s");
  EXPECT_EQ(g->outputs()[0]->producer->op_type(), "Identity");
  const Tensor x = random_tensor({3}, 7);
  expect_close(Session(g).run({Tensor::zeros(DType::kF32, {3}), x})[0], x, 0.0, 0.0);
}

// GatherGrad(shape, ids, dY, addend) is a sum: a zero dY leaves the addend, a zero addend drops it,
// both zero make zero; never zero for one zero operand alone.
TEST(ZeroInputElimination, AGatherGradOntoAnAddendIsASum) {
  auto build = [] {
    auto g = testing::graph_with_opsets();
    Value* ids = g->add_input("ids", DType::kI64, Shape({4}));
    Value* dy = g->add_input("dy", DType::kF32, Shape({4, 3}));
    Value* addend = g->add_input("addend", DType::kF32, Shape({5, 3}));
    Value* shape = g->add_initializer("shape", Tensor::from_i64({5, 3}));
    Value* dw = g->add_node("GatherGrad", {shape, ids, dy, addend}, {"dw"}, kTrainrtDomain)->output(0);
    g->add_output(g->add_node("Relu", {dw}, {"read"})->output(0));
    infer_graph_shapes(*g);
    return g;
  };
  const Tensor ids = testing::make_tensor<int64_t>({4}, {1, 4, 4, 0});
  const Tensor dy = random_tensor({4, 3}, 5), addend = random_tensor({5, 3}, 6);
  const Tensor dy0 = Tensor::zeros(DType::kF32, {4, 3}), addend0 = Tensor::zeros(DType::kF32, {5, 3});
  for (const auto& [zero, feeds] : std::vector<std::pair<std::string, std::vector<Tensor>>>{
           {"dy", {ids, dy0, addend}}, {"addend", {ids, dy, addend0}}, {"none", {ids, dy, addend}}}) {
    SCOPED_TRACE(zero + " zero");
    auto g = build();
    EXPECT_EQ(ZeroInputElimination({zero}).apply(*g), zero != "none");
    verify(*g);
    EXPECT_EQ(count(*g, "GatherGrad"), zero == "dy" ? 0 : 1);
    if (zero == "addend") EXPECT_EQ(g->find_value("dw")->producer->input(3), nullptr);
    expect_close(Session(g).run(feeds)[0], Session(build()).run(feeds)[0], 0.0, 0.0);
  }
  auto both = build();
  both->add_output(both->find_value("dw"));
  ZeroInputElimination({"dy", "addend"}).apply(*both);
  EXPECT_EQ(count(*both, "GatherGrad"), 1);  // a graph output stays, its reader Relu of zeros too
}

TEST(ZeroInputElimination, NoZeroInputChangesNothing) {
  auto g = backward_like_graph();
  const int before = g->num_nodes();
  EXPECT_FALSE(ZeroInputElimination({"dpath_missing"}).apply(*g));
  EXPECT_EQ(g->num_nodes(), before);
}

}  // namespace
}  // namespace trainrt
