// Label sparsity: ValidRows' rows, LabelSparsity's IR before and after on an LM head and the same
// loss from it, RowScatterPushdown's IR on a backward's scatter and the same gradients from it.
#include "trainrt/passes/label_sparsity.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/ops/valid_rows.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::make_tensor;
using testing::random_tensor;

std::vector<int64_t> rows_of(const std::vector<int64_t>& labels, int64_t multiple) {
  const Tensor t = make_tensor<int64_t>({static_cast<int64_t>(labels.size())}, labels);
  Tensor rows = Tensor::empty(DType::kI64, {valid_rows_count(t, -100, multiple)});
  fill_valid_rows(t, -100, rows);
  return rows.to_i64_vector();
}

TEST(ValidRows, KeepsTheCountedRowsInOrderAndPadsWithTheFirstIgnoredOnes) {
  EXPECT_EQ(rows_of({5, -100, 7, -100, 2}, 4), (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(rows_of({5, -100, 7, -100, 2}, 1), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(rows_of({-100, 5, -100, 7, 2, -100}, 4), (std::vector<int64_t>{0, 1, 3, 4}));
  // At most N, distinct and sorted: then every row, in order.
  EXPECT_EQ(rows_of({5, -100, 7, -100, 2}, 64), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(rows_of({3, 1, 2}, 2), (std::vector<int64_t>{0, 1, 2}));                      // all count: N
  EXPECT_EQ(rows_of({-100, -100, -100}, 2), (std::vector<int64_t>{0, 1}));                // none count
}

// h (2, 3, 4) -> FusedMatMul(w (4, 6) with bias) -> Gelu -> Reshape (6, 6) -> SCE(labels, mean)
// with `logits_is_output`: the product (2, 3, 6) is a graph output too.
std::shared_ptr<Graph> lm_head(bool logits_is_output, const std::string& reduction = "mean") {
  auto g = testing::graph_with_opsets();
  Value* h = g->add_input("h", DType::kF32, Shape({2, 3, 4}));
  Value* w = g->add_input("w", DType::kF32, Shape({4, 6}));
  Value* b = g->add_input("b", DType::kF32, Shape({6}));
  Value* labels = g->add_input("labels", DType::kI64, Shape({6}));
  Value* logits = g->add_node("FusedMatMul", {h, w, b}, {"logits"}, kTrainrtDomain)->output(0);
  Value* act = g->add_node("Gelu", {logits}, {"act"})->output(0);
  Value* dims = g->add_initializer("dims", Tensor::from_i64({-1, 6}));
  Value* scores = g->add_node("Reshape", {act, dims}, {"scores"})->output(0);
  Node* loss = g->add_node("SoftmaxCrossEntropyLoss", {scores, labels}, {"loss"});
  loss->set_attr("reduction", Attribute::of_string(reduction));
  loss->set_attr("ignore_index", Attribute::of_int(-100));
  g->add_output(loss->output(0));
  if (logits_is_output) g->add_output(logits);
  infer_graph_shapes(*g);
  return g;
}

std::vector<Tensor> lm_inputs(std::vector<int64_t> labels) {
  return {random_tensor({2, 3, 4}, 1), random_tensor({4, 6}, 2), random_tensor({6}, 3),
          make_tensor<int64_t>({6}, labels)};
}

TEST(LabelSparsity, MovesTheGatherAboveTheHeadWhenNothingElseReadsIt) {
  auto g = lm_head(false);
  EXPECT_TRUE(LabelSparsity().apply(*g));
  verify(*g);
  ASSERT_EQ(count(*g, "ValidRows"), 1);
  // The product reads the gathered rows of h; the full-size head and its Reshape are gone.
  ASSERT_EQ(count(*g, "FusedMatMul"), 1);
  const Node* product = nullptr;
  for (const Node* n : g->nodes())
    if (n->op_type() == "FusedMatMul") product = n;
  EXPECT_EQ(product->input(0)->producer->op_type(), "Gather");
  EXPECT_EQ(count(*g, "Reshape"), 0);
  EXPECT_FALSE(LabelSparsity().apply(*g));  // once
}

TEST(LabelSparsity, StopsAtAValueSomethingElseReadsAndKeepsItWhole) {
  auto g = lm_head(true);
  EXPECT_TRUE(LabelSparsity().apply(*g));
  verify(*g);
  ASSERT_EQ(count(*g, "FusedMatMul"), 1);  // the logits, still computed for the output
  EXPECT_EQ(g->outputs()[1]->name, "logits");
  EXPECT_EQ(count(*g, "Gelu"), 1);  // on the gathered rows of the logits
}

TEST(LabelSparsity, GivesTheFullLossForAnyLabels) {
  for (bool logits_is_output : {false, true}) {
    for (const std::string& reduction : {"mean", "sum"}) {
      for (const std::vector<int64_t>& labels :
           {std::vector<int64_t>{1, -100, 5, 0, -100, 3}, {1, 2, 3, 4, 5, 0}, {-100, 4, -100, -100, -100, -100}}) {
        auto dense = lm_head(logits_is_output, reduction);
        auto sparse = lm_head(logits_is_output, reduction);
        ASSERT_TRUE(LabelSparsity().apply(*sparse));
        const auto expected = Session(dense).run(lm_inputs(labels));
        const auto got = Session(sparse).run(lm_inputs(labels));
        for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], 1e-6, 1e-7);
      }
    }
  }
}

TEST(LabelSparsity, TheKeptRowsLiveInThePlannedArena) {
  auto sparse = lm_head(false);
  ASSERT_TRUE(LabelSparsity().apply(*sparse));
  Session session(sparse);
  Session dense(lm_head(false));
  // The first run learns the row count (no plan knows it before; R is min(N, 64) = 6 here, as it is
  // at least that) and keeps those values on the heap; the next runs plan arena
  // blocks of that many rows for them.
  int run = 0;
  for (const std::vector<int64_t>& labels : {std::vector<int64_t>{1, -100, 5, 0, -100, 3}, {1, 2, 3, 4, 5, 0},
                                             {-100, 4, -100, -100, -100, -100}}) {
    const auto got = session.run(lm_inputs(labels));
    expect_close(got[0], dense.run(lm_inputs(labels))[0], 1e-6, 1e-7);
    if (run++ == 0) EXPECT_GT(session.memory_stats().peak_dynamic_bytes, 0u);
    else EXPECT_EQ(session.memory_stats().peak_dynamic_bytes, 0u);
  }
}

TEST(LabelSparsity, LeavesPerRowLossesAlone) {
  auto g = lm_head(false, "none");
  EXPECT_FALSE(LabelSparsity().apply(*g));
}

// A backward's scatter of the valid rows' gradient dv (R, 6) into (6, 6), read through a Reshape
// to (2, 3, 6) by dX = s W^T (FusedMatMul), dW = Flatten(s)^T H (Gemm) and db (ReduceSumToShape).
// `bf16`: as under autocast, the readers are bf16 and read a Cast of the (f32) Reshape, whose dims
// come from a runtime shape tensor (a forward Shape, as in a real backward: an input here).
std::shared_ptr<Graph> scatter_readers(bool bf16 = false) {
  auto g = testing::graph_with_opsets();
  const DType t = bf16 ? DType::kBF16 : DType::kF32;
  Value* rows = g->add_input("labels/valid_rows", DType::kI64, Shape({Dim::symbolic("r")}));
  Value* dv = g->add_input("dv", DType::kF32, Shape({Dim::symbolic("r"), 6}));
  Value* w = g->add_input("w", t, Shape({4, 6}));
  Value* h = g->add_input("h", t, Shape({6, 4}));
  Value* full = g->add_initializer("full", Tensor::from_i64({6, 6}));
  Value* lead =
      bf16 ? g->add_input("lead", DType::kI64, Shape({3})) : g->add_initializer("lead", Tensor::from_i64({2, 3, 6}));
  Value* bias_dims = g->add_initializer("bias_dims", Tensor::from_i64({6}));
  Node* scatter = g->add_node("GatherGrad", {full, rows, dv}, {"s"}, kTrainrtDomain);
  scatter->set_attr("axis", Attribute::of_int(0));
  Value* s3 = g->add_node("Reshape", {scatter->output(0), lead}, {"s3"})->output(0);
  if (bf16) {
    Node* narrow = g->add_node("Cast", {s3}, {"s3_bf16"});
    narrow->set_attr("to", Attribute::of_int(16));
    s3 = narrow->output(0);
  }
  Node* dx = g->add_node("FusedMatMul", {s3, w}, {"dx"}, kTrainrtDomain);
  dx->set_attr("transB", Attribute::of_int(1));
  Node* flat = g->add_node("Flatten", {s3}, {"s_flat"});
  flat->set_attr("axis", Attribute::of_int(-1));
  Node* dw = g->add_node("Gemm", {flat->output(0), h}, {"dw"});
  dw->set_attr("transA", Attribute::of_int(1));
  Value* db = g->add_node("ReduceSumToShape", {s3, bias_dims}, {"db"}, kTrainrtDomain)->output(0);
  g->add_output(dx->output(0));
  g->add_output(dw->output(0));
  g->add_output(db);
  infer_graph_shapes(*g);
  if (bf16)  // known to the builder, as the autodiff knows each gradient's dims from its forward value
    for (const auto& [name, dims] : {std::pair<const char*, std::vector<int64_t>>{"s3", {2, 3, 6}},
                                     {"s3_bf16", {2, 3, 6}}, {"s_flat", {6, 6}}})
      g->find_value(name)->shape = Shape::of(dims);
  return g;
}

TEST(RowScatterPushdown, ReadersOfTheScatterRunOnTheRowsAndGiveTheSameGradients) {
  auto plain = scatter_readers();
  auto pushed = scatter_readers();
  EXPECT_TRUE(RowScatterPushdown().apply(*pushed));
  verify(*pushed);
  // The (6, 6) scatter is gone; one of dX's (6, 4) rows replaces it.
  ASSERT_EQ(count(*pushed, "GatherGrad"), 1);
  for (const Node* n : pushed->nodes())
    if (n->op_type() == "GatherGrad") EXPECT_EQ(n->input(2)->producer->op_type(), "FusedMatMul");
  EXPECT_EQ(pushed->find_value("db")->producer->input(0)->name, "dv");
  // Rows with repeats (padding) and an unsorted order: scatter-add semantics either way.
  const std::vector<Tensor> inputs = {make_tensor<int64_t>({4}, {0, 2, 5, 2}), random_tensor({4, 6}, 4),
                                      random_tensor({4, 6}, 5), random_tensor({6, 4}, 6)};
  const auto expected = Session(plain).run(inputs);
  const auto got = Session(pushed).run(inputs);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], 1e-5, 1e-6);
}

// Under autocast: the Cast moves onto the R rows (Cast(scatter(dv)) = scatter(Cast(dv))), and the
// bf16 readers are pushed as the f32 ones are; the same gradients (the casts and products round the
// same values: the scattered zeros add nothing).
TEST(RowScatterPushdown, ACastOfTheScatterCastsTheRowsInstead) {
  auto plain = scatter_readers(true);
  auto pushed = scatter_readers(true);
  EXPECT_TRUE(RowScatterPushdown().apply(*pushed));
  verify(*pushed);
  ASSERT_EQ(count(*pushed, "GatherGrad"), 1);
  for (const Node* n : pushed->nodes()) {
    if (n->op_type() == "GatherGrad") EXPECT_EQ(n->input(2)->producer->op_type(), "FusedMatMul");
    if (n->op_type() == "Cast") EXPECT_EQ(n->input(0)->name, "dv") << "the Cast reads the R rows";
  }
  EXPECT_EQ(pushed->find_value("db")->producer->input(0)->producer->op_type(), "Cast");
  const std::vector<Tensor> inputs = {make_tensor<int64_t>({4}, {0, 2, 5, 1}), random_tensor({4, 6}, 4),
                                      testing::to_bf16(random_tensor({4, 6}, 5)),
                                      testing::to_bf16(random_tensor({6, 4}, 6)), Tensor::from_i64({2, 3, 6})};
  const auto expected = Session(plain).run(inputs);
  const auto got = Session(pushed).run(inputs);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], 1e-2, 1e-3);
}

}  // namespace
}  // namespace trainrt
