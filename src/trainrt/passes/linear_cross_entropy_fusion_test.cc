// LinearCrossEntropyFusion: the forward program's head, loss and loss gradient become one node
// (before/after IR), with the same loss and gradients as the nodes it replaced; and the patterns it
// must leave alone.
#include "trainrt/passes/linear_cross_entropy_fusion.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;

struct HeadOptions {
  bool trans_w = true;        // W (C, K) and products with transB; else W (K, C)
  bool bias = false;          // through Gemm's C, with its ReduceSum gradient
  bool bias_to_shape = false;  // the bias gradient as ReduceSumToShape(dS, Shape(B)), as autodiff makes it
  bool scores_out = false;    // the scores are a graph output too: left alone
  bool bf16 = false;          // autocast's head: bf16 X, W, B and products, Casts around the loss
};


// The forward program rule 7 makes for a head of 16 classes over (tokens, 4) features:
// loss, dX and dW (and dB) for dLoss = 1.
std::shared_ptr<Graph> head_program(const HeadOptions& o) {
  auto g = testing::graph_with_opsets();
  const auto typed = [&](const Tensor& t) { return o.bf16 ? testing::to_bf16(t) : t; };
  Value* x = g->add_input("x", o.bf16 ? DType::kBF16 : DType::kF32, Shape({Dim::symbolic("tokens"), 4}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({Dim::symbolic("tokens")}));
  Value* w = g->add_initializer(
      "w", typed(random_tensor(o.trans_w ? std::vector<int64_t>{16, 4} : std::vector<int64_t>{4, 16}, 1)));
  Value* b = o.bias ? g->add_initializer("b", typed(random_tensor({16}, 2))) : nullptr;
  Node* head = g->add_node("Gemm", {x, w, b}, {"scores"});
  head->set_attr("transB", Attribute::of_int(o.trans_w));
  Value* scores = head->output(0);
  if (o.bf16) {
    Node* widen = g->add_node("Cast", {scores}, {"scores_f32"});
    widen->set_attr("to", Attribute::of_int(1));
    scores = widen->output(0);
  }
  Node* loss = g->add_node("SoftmaxCrossEntropyLoss", {scores, labels}, {"loss", "log_prob"});
  loss->set_attr("ignore_index", Attribute::of_int(-100));
  Value* one = g->add_initializer("one", Tensor::scalar<float>(1.f));
  Node* grad = g->add_node("SoftmaxCrossEntropyLossGrad", {one, loss->output(1), labels}, {"ds"}, kTrainrtDomain);
  grad->set_attr("ignore_index", Attribute::of_int(-100));
  Value* ds = grad->output(0);
  if (o.bf16) {
    Node* narrow = g->add_node("Cast", {ds}, {"ds_bf16"});
    narrow->set_attr("to", Attribute::of_int(16));
    ds = narrow->output(0);
  }
  Node* dx = g->add_node("FusedMatMul", {ds, w}, {"dx"}, kTrainrtDomain);
  dx->set_attr("transB", Attribute::of_int(!o.trans_w));
  Node* dw = o.trans_w ? g->add_node("Gemm", {ds, x}, {"dw"}) : g->add_node("Gemm", {x, ds}, {"dw"});
  dw->set_attr("transA", Attribute::of_int(1));
  for (Value* v : {loss->output(0), dx->output(0), dw->output(0)}) g->add_output(v);
  if (o.bias && o.bias_to_shape) {
    Value* shape = g->add_node("Shape", {b}, {"b_shape"})->output(0);
    g->add_output(g->add_node("ReduceSumToShape", {ds, shape}, {"db"}, kTrainrtDomain)->output(0));
  } else if (o.bias) {
    Node* db = g->add_node("ReduceSum", {ds, g->add_initializer("axes", Tensor::from_i64({0}))}, {"db"});
    db->set_attr("keepdims", Attribute::of_int(0));
    g->add_output(db->output(0));
  }
  if (o.scores_out) g->add_output(scores);
  infer_graph_shapes(*g);
  return g;
}

std::vector<Tensor> run(const std::shared_ptr<Graph>& g, bool bf16 = false) {
  const Tensor x = random_tensor({9, 4}, 3, -2.f, 2.f);
  return Session(g).run({bf16 ? testing::to_bf16(x) : x, make_tensor<int64_t>({9}, {0, 15, -100, 9, 3, 3, 11, 7, 1})});
}

TEST(LinearCrossEntropyFusion, TheHeadLossAndGradientsBecomeOneNode) {
  for (const HeadOptions o : {HeadOptions{}, HeadOptions{.trans_w = false}, HeadOptions{.bias = true},
                              HeadOptions{.trans_w = false, .bias = true},
                              HeadOptions{.bias = true, .bias_to_shape = true}}) {
    SCOPED_TRACE(fmt("trans_w ", o.trans_w, " bias ", o.bias, " to shape ", o.bias_to_shape));
    auto plain = head_program(o);
    auto fused = head_program(o);
    EXPECT_TRUE(LinearCrossEntropyFusion().apply(*fused));
    EXPECT_EQ(fused->num_nodes(), 1);  // the bias's Shape went with its reader
    EXPECT_EQ(count(*fused, "LinearSoftmaxCrossEntropy"), 1);
    const Node& node = *fused->nodes()[0];
    EXPECT_EQ(node.attr_int("trans_w", -1), o.trans_w);
    EXPECT_EQ(node.attr_int("ignore_index", 0), -100);
    EXPECT_EQ(node.output(3) != nullptr, o.bias);
    ASSERT_NE(node.output(4), nullptr) << "the block of scores, a buffer of the plan's";
    EXPECT_TRUE(node.output(4)->uses.empty());
    EXPECT_TRUE(node.output(4)->shape.is_static());
    const std::vector<Tensor> want = run(plain), got = run(fused);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], 1e-5, 1e-6);
  }
}

// Autocast's head: the two Casts go with the nodes, the node runs on bf16 X and W and gives bf16
// gradients; the loss as the unfused bf16 nodes give it, the gradients within bf16's rounding.
TEST(LinearCrossEntropyFusion, ABf16HeadWithItsCastsBecomesOneNode) {
  for (const HeadOptions o : {HeadOptions{.bf16 = true}, HeadOptions{.trans_w = false, .bias = true, .bias_to_shape = true, .bf16 = true}}) {
    SCOPED_TRACE(fmt("trans_w ", o.trans_w, " bias ", o.bias));
    auto plain = head_program(o);
    auto fused = head_program(o);
    EXPECT_TRUE(LinearCrossEntropyFusion().apply(*fused));
    EXPECT_EQ(fused->num_nodes(), 1);
    const Node& node = *fused->nodes()[0];
    EXPECT_EQ(node.input(0)->dtype, DType::kBF16);
    for (int i : {1, 2}) EXPECT_EQ(node.output(i)->dtype, DType::kBF16) << "output " << i;
    ASSERT_NE(node.output(4), nullptr);
    EXPECT_TRUE(node.output(4)->shape.is_static());
    const std::vector<Tensor> want = run(plain, true), got = run(fused, true);
    ASSERT_EQ(got.size(), want.size());
    expect_close(got[0], want[0], 1e-5, 1e-6);
    for (size_t i = 1; i < want.size(); ++i) expect_close(got[i], want[i], 1e-2, 1e-3);
  }
}

// A bf16 head whose bf16 scores something else reads too (logits returned beside the loss) is left
// alone, as the f32 one is.
TEST(LinearCrossEntropyFusion, ABf16HeadWhoseScoresAreReadElsewhereIsLeftAlone) {
  auto g = head_program({.bf16 = true});
  g->add_output(g->find_value("scores"));
  EXPECT_FALSE(LinearCrossEntropyFusion().apply(*g));
  EXPECT_EQ(count(*g, "SoftmaxCrossEntropyLoss"), 1);
}

TEST(LinearCrossEntropyFusion, ScoresSomethingElseReadsAreLeftAlone) {
  auto g = head_program({.scores_out = true});
  EXPECT_FALSE(LinearCrossEntropyFusion().apply(*g));
  EXPECT_EQ(count(*g, "SoftmaxCrossEntropyLoss"), 1);
}

TEST(LinearCrossEntropyFusion, AGradientForALossGradientOtherThanOneIsLeftAlone) {
  auto g = head_program({});
  for (Value* v : g->initializers())
    if (v->name == "one") v->data.data<float>()[0] = 2.f;
  EXPECT_FALSE(LinearCrossEntropyFusion().apply(*g));
}

}  // namespace
}  // namespace trainrt
