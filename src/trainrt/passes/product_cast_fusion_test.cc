// ProductCastFusion: a bf16 product's widening Cast folded into it (before/after IR), the product
// then giving the f32 sum unrounded, within bf16's rounding of the unfused pair and closer to the
// double product; and the pairs it must leave alone.
#include "trainrt/passes/product_cast_fusion.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainrt/core/testing.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::count;

struct Spec {
  std::string op = "Gemm";   // Gemm (transA = 1: a weight gradient dY^T X), MatMul or FusedMatMul
  bool cast_is_f16 = false;  // a Cast to another type: left alone
  bool product_read_elsewhere = false;
};

// y = Cast<f32>(product(a, b)): a (6, 4) stored transposed for Gemm, b (6, 5).
std::shared_ptr<Graph> pair(const Spec& spec) {
  auto g = testing::graph_with_opsets();
  const bool gemm = spec.op == "Gemm";
  Value* a = g->add_input("a", DType::kBF16, gemm ? Shape({6, 4}) : Shape({4, 6}));
  Value* b = g->add_input("b", DType::kBF16, Shape({6, 5}));
  Node* p = g->add_node(spec.op, {a, b}, {"p"}, spec.op == "FusedMatMul" ? kTrainrtDomain : kOnnxDomain, "product");
  if (gemm) p->set_attr("transA", Attribute::of_int(1));
  if (spec.op == "FusedMatMul") p->set_attr("alpha", Attribute::of_float(0.5f));
  Node* cast = g->add_node("Cast", {p->output(0)}, {"y"});
  cast->set_attr("to", Attribute::of_int(spec.cast_is_f16 ? 10 : 1));
  g->add_output(cast->output(0));
  if (spec.product_read_elsewhere) g->add_output(p->output(0));
  infer_graph_shapes(*g);
  return g;
}

TEST(ProductCastFusion, TheProductWritesF32ItselfCloserToTheTrueProduct) {
  for (const char* op : {"Gemm", "MatMul", "FusedMatMul"}) {
    SCOPED_TRACE(op);
    auto plain = pair({.op = op});
    auto fused = pair({.op = op});
    EXPECT_TRUE(ProductCastFusion().apply(*fused));
    verify(*fused);
    EXPECT_EQ(count(*fused, "Cast"), 0);
    ASSERT_EQ(fused->num_nodes(), 1);
    const Node* n = fused->find_value("y")->producer;
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->op_type(), "FusedMatMul");
    EXPECT_EQ(n->name(), "product");
    EXPECT_EQ(n->attr_int("output_dtype", 0), 1);
    EXPECT_EQ(n->output(0)->dtype, DType::kF32);
    const bool gemm = std::string(op) == "Gemm";
    const std::vector<int64_t> a_dims = gemm ? std::vector<int64_t>{6, 4} : std::vector<int64_t>{4, 6};
    const Tensor a = testing::to_bf16(testing::random_tensor(a_dims, 1));
    const Tensor b = testing::to_bf16(testing::random_tensor({6, 5}, 2));
    const Tensor want = Session(plain).run({a, b})[0], got = Session(fused).run({a, b})[0];
    ASSERT_EQ(got.dtype(), DType::kF32);
    const float alpha = std::string(op) == "FusedMatMul" ? 0.5f : 1.f;
    double fused_error = 0, plain_error = 0;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double exact = 0;
        for (int64_t l = 0; l < 6; ++l)
          exact += a.to_double(gemm ? l * 4 + i : i * 6 + l) * b.to_double(l * 5 + j);
        exact *= alpha;
        const double g = got.to_double(i * 5 + j), w = want.to_double(i * 5 + j);
        EXPECT_NEAR(g, w, 1e-2 * (1 + std::abs(w)));  // the unfused pair's bf16 rounding
        EXPECT_NEAR(g, exact, 1e-5 * (1 + std::abs(exact)));
        fused_error += std::abs(g - exact);
        plain_error += std::abs(w - exact);
      }
    EXPECT_LT(fused_error, plain_error);
  }
}

TEST(ProductCastFusion, OtherCastsAndProductsReadElsewhereAreLeftAlone) {
  auto f16 = pair({.cast_is_f16 = true});
  EXPECT_FALSE(ProductCastFusion().apply(*f16));
  auto read = pair({.product_read_elsewhere = true});
  EXPECT_FALSE(ProductCastFusion().apply(*read));
  EXPECT_EQ(count(*read, "Cast"), 1);
}

}  // namespace
}  // namespace trainrt
