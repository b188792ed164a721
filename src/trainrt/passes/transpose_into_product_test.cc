// TransposeIntoProduct: attention's keys transpose and a Gemm's transposed operand become flags:
// the same results, and the copies are gone. (The gradients of FusedMatMul and Gemm under every
// flag are autodiff's tests.)
#include "trainrt/passes/transpose_into_product.h"

#include <gtest/gtest.h>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;
using testing::expect_close;
using testing::random_tensor;

Value* transpose(Graph& g, Value* x, std::vector<int64_t> perm, const std::string& name) {
  Node* t = g.add_node("Transpose", {x}, {name});
  t->set_attr("perm", Attribute::of_ints(std::move(perm)));
  return t->output(0);
}

// scores = MatMul(q, Transpose(k, (0, 1, 3, 2))) over (2, 3, 5, 4); z = Gemm(Transpose(a), b, c)
// with transB; w = FusedMatMul(Transpose(q), k) with both flags set: transA flips back to 0.
// `kt_read_elsewhere`: Neg reads kt too, so that Transpose stays.
std::shared_ptr<Graph> products_of_transposes(bool kt_read_elsewhere) {
  auto g = testing::graph_with_opsets();
  Value* q = g->add_input("q", DType::kF32, Shape({2, 3, 5, 4}));
  Value* k = g->add_input("k", DType::kF32, Shape({2, 3, 5, 4}));
  Value* a = g->add_input("a", DType::kF32, Shape({6, 7}));
  Value* b = g->add_input("b", DType::kF32, Shape({8, 6}));
  Value* c = g->add_input("c", DType::kF32, Shape({8}));
  Value* kt = transpose(*g, k, {0, 1, 3, 2}, "kt");
  g->add_output(g->add_node("MatMul", {q, kt}, {"scores"})->output(0));
  Node* gemm = g->add_node("Gemm", {transpose(*g, a, {1, 0}, "at"), b, c}, {"z"});
  gemm->set_attr("transB", Attribute::of_int(1));
  g->add_output(gemm->output(0));
  Node* fused = g->add_node("FusedMatMul", {transpose(*g, q, {0, 1, 3, 2}, "qt"), k}, {"w"}, kTrainrtDomain);
  fused->set_attr("transA", Attribute::of_int(1));
  fused->set_attr("transB", Attribute::of_int(1));
  g->add_output(fused->output(0));
  if (kt_read_elsewhere) g->add_output(g->add_node("Neg", {kt}, {"neg_kt"})->output(0));
  // Not folded: a Transpose of other axes.
  Value* k2 = g->add_input("k2", DType::kF32, Shape({3, 2, 5, 4}));
  g->add_output(g->add_node("MatMul", {q, transpose(*g, k2, {1, 0, 3, 2}, "k_other")}, {"other"})->output(0));
  infer_graph_shapes(*g);
  return g;
}

TEST(TransposeIntoProduct, TransposesOfTheLastTwoAxesBecomeFlags) {
  for (bool kt_read_elsewhere : {false, true}) {
    SCOPED_TRACE(kt_read_elsewhere);
    auto g = products_of_transposes(kt_read_elsewhere);
    ASSERT_TRUE(TransposeIntoProduct().apply(*g));
    verify(*g);
    EXPECT_EQ(count(*g, "Transpose"), kt_read_elsewhere ? 2 : 1) << "k_other stays; kt while Neg reads it";
    EXPECT_EQ(count(*g, "FusedMatMul"), 2);
    const Node* scores = g->find_value("scores")->producer;
    EXPECT_EQ(scores->op_type(), "FusedMatMul");
    EXPECT_EQ(scores->attr_int("transB", 0), 1);
    const Node* z = g->find_value("z")->producer;
    EXPECT_EQ(z->attr_int("transA", 0), 1);
    EXPECT_EQ(z->attr_int("transB", 0), 1);
    EXPECT_EQ(z->num_inputs(), 3u);
    EXPECT_EQ(g->find_value("w")->producer->attr_int("transA", 1), 0) << "a set flag flips";
    const std::vector<Tensor> in = {random_tensor({2, 3, 5, 4}, 1), random_tensor({2, 3, 5, 4}, 2),
                                    random_tensor({6, 7}, 3), random_tensor({8, 6}, 4), random_tensor({8}, 5),
                                    random_tensor({3, 2, 5, 4}, 6)};
    const std::vector<Tensor> want = Session(products_of_transposes(kt_read_elsewhere)).run(in);
    const std::vector<Tensor> got = Session(g).run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], 1e-6, 1e-6);
  }
}

TEST(TransposeIntoProduct, LeavesVectorAndIntegerProductsAlone) {
  auto g = testing::graph_with_opsets();
  Value* m = g->add_input("m", DType::kF32, Shape({3, 4}));
  Value* v = g->add_input("v", DType::kF32, Shape({4}));
  g->add_output(g->add_node("MatMul", {v, transpose(*g, m, {1, 0}, "mt")}, {"y"})->output(0));
  Value* i = g->add_input("i", DType::kI64, Shape({3, 4}));
  g->add_output(g->add_node("MatMul", {i, transpose(*g, i, {1, 0}, "it")}, {"ii"})->output(0));
  infer_graph_shapes(*g);
  EXPECT_FALSE(TransposeIntoProduct().apply(*g));
}

}  // namespace
}  // namespace trainrt
