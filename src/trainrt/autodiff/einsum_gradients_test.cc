// Einsum's gradient against f64 finite differences: products with batch, contracted and kept
// labels, a label summed in one operand only, three operands, broadcast ellipsis dims, transposes
// and sums of one operand; and the refusal of a diagonal's gradient.
#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::random_f64;
using testing::WorstErrors;

NodeSpec einsum(const char* equation) { return {.op = "Einsum", .attrs = {{"equation", Attribute::of_string(equation)}}}; }

TEST(EinsumGradients, MatchFiniteDifferences) {
  WorstErrors worst;
  worst.check(einsum("bij,bjk->bik"), {random_f64({2, 3, 4}, 1), random_f64({2, 4, 5}, 2)});
  worst.check(einsum("bhqd,bhkd->bhqk"), {random_f64({2, 2, 3, 4}, 3), random_f64({2, 2, 5, 4}, 4)});
  worst.check(einsum("ij,jk"), {random_f64({3, 4}, 5), random_f64({4, 2}, 6)});  // implicit output: ik
  worst.check(einsum("ijk,jl->il"), {random_f64({2, 3, 4}, 7), random_f64({3, 5}, 8)});  // k summed in A only
  worst.check(einsum("i,j->ij"), {random_f64({3}, 9), random_f64({4}, 10)});
  worst.check(einsum("ab,bc,cd->ad"), {random_f64({2, 3}, 11), random_f64({3, 4}, 12), random_f64({4, 2}, 13)});
  worst.check(einsum("...ij,...jk->...ik"), {random_f64({2, 1, 3, 4}, 14), random_f64({3, 4, 2}, 15)});  // broadcast
  worst.check(einsum("ij,...jk->...ik"), {random_f64({3, 4}, 21), random_f64({2, 4, 5}, 22)});  // A: no ellipsis
  worst.check(einsum("i...j,j->...i"), {random_f64({3, 2, 1, 4}, 23), random_f64({4}, 24)});  // ellipsis inside
  worst.check(einsum("ij->ji"), {random_f64({3, 4}, 16)});
  worst.check(einsum("ijk->j"), {random_f64({2, 3, 4}, 17)});
  worst.check(einsum("i,i->"), {random_f64({5}, 18), random_f64({5}, 19)});
}

TEST(EinsumGradients, ADiagonalHasNoRuleAndSaysSo) {
  try {
    testing::expect_gradients_match(einsum("ii->i"), {random_f64({3, 3}, 20)});
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("repeats a label"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
