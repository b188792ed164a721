// Einsum beyond the ONNX node tests: a brute-force sum over every label combination as the
// reference for products, broadcasts, diagonals, three operands, uppercase labels and implicit
// outputs; integer operands; empty dims; and malformed equations naming the node.
#include <gtest/gtest.h>

#include <map>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/node_runner.h"
#include "trainrt/testing/gradient_check.h"

namespace trainrt {
namespace {

using testing::make_tensor;

Tensor as_f32(const Tensor& x) {
  Tensor y = Tensor::empty(DType::kF32, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = static_cast<float>(x.to_double(i));
  return y;
}

// Y[out] = sum over the other letters of prod X_i[term_i], terms of explicit equations without
// ellipses: the definition, one element at a time.
std::vector<double> brute_force(const std::string& lhs, const std::string& out, const std::vector<Tensor>& xs) {
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    size_t c = lhs.find(',', b);
    terms.push_back(lhs.substr(b, c == std::string::npos ? std::string::npos : c - b));
    if (c == std::string::npos) break;
    b = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t a = 0; a < terms[i].size(); ++a) size[terms[i][a]] = xs[i].dim(static_cast<int64_t>(a));
  std::vector<char> letters;
  for (auto& [c, _] : size) letters.push_back(c);
  int64_t out_count = 1;
  for (char c : out) out_count *= size[c];
  std::vector<double> y(static_cast<size_t>(out_count), 0.0);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  for (;;) {
    double p = 1.0;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t off = 0;
      for (size_t a = 0; a < terms[i].size(); ++a) off = off * xs[i].dim(static_cast<int64_t>(a)) + at[terms[i][a]];
      p *= xs[i].to_double(off);
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    y[static_cast<size_t>(o)] += p;
    size_t d = letters.size();
    while (d-- > 0) {
      if (++at[letters[d]] < size[letters[d]]) break;
      at[letters[d]] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
  return y;
}

TEST(EinsumKernels, MatchTheDefinition) {
  struct Case {
    std::string lhs, out;
    std::vector<std::vector<int64_t>> dims;
  };
  for (const Case& c : std::vector<Case>{{"bij,bjk", "bik", {{2, 3, 4}, {2, 4, 5}}},
                                         {"ij,kj", "ik", {{3, 4}, {5, 4}}},
                                         {"iij,jk", "ik", {{3, 3, 2}, {2, 4}}},  // a diagonal in a product
                                         {"ab,bc,cd", "da", {{2, 3}, {3, 4}, {4, 5}}},
                                         {"ijk,jl", "li", {{2, 3, 4}, {3, 5}}},
                                         {"Ab,bA", "", {{3, 2}, {2, 3}}},
                                         {"i,j,k", "kji", {{2}, {3}, {4}}}}) {
    SCOPED_TRACE(c.lhs + "->" + c.out);
    std::vector<Tensor> xs, fs;
    for (size_t i = 0; i < c.dims.size(); ++i) xs.push_back(testing::random_f64(c.dims[i], 40 + static_cast<uint32_t>(i)));
    for (const Tensor& x : xs) fs.push_back(as_f32(x));
    const auto expected = brute_force(c.lhs, c.out, xs);
    const std::map<std::string, Attribute> attrs = {{"equation", Attribute::of_string(c.lhs + "->" + c.out)}};
    for (const Tensor& y : {run_node("Einsum", xs, attrs)[0], run_node("Einsum", fs, attrs)[0]}) {
      ASSERT_EQ(y.numel(), static_cast<int64_t>(expected.size()));
      for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.to_double(i), expected[static_cast<size_t>(i)], 1e-5) << i;
    }
  }
}

TEST(EinsumKernels, BroadcastEllipsisImplicitOutputIntegersAndEmptyDims) {
  // (2, 1, 3, 4) x (3, 4, 2): the batch dims broadcast to (2, 3).
  const Tensor a = testing::random_f64({2, 1, 3, 4}, 50), b = testing::random_f64({3, 4, 2}, 51);
  const Tensor y = run_node("Einsum", {a, b}, {{"equation", Attribute::of_string("...ij,...jk->...ik")}})[0];
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 3, 3, 2}));
  double expect = 0;
  for (int64_t j = 0; j < 4; ++j) expect += a.to_double(1 * 12 + 2 * 4 + j) * b.to_double(2 * 8 + j * 2 + 1);
  EXPECT_NEAR(y.to_double(((1 * 3 + 2) * 3 + 2) * 2 + 1), expect, 1e-12);
  // Implicit output: the labels used once, uppercase first (numpy's order).
  const Tensor t = run_node("Einsum", {testing::random_f64({2, 3}, 52)}, {{"equation", Attribute::of_string("aB")}})[0];
  EXPECT_EQ(t.dims(), (std::vector<int64_t>{3, 2}));
  const Tensor ints = run_node("Einsum", {make_tensor<int64_t>({2, 2}, {1, 2, 3, 4}), make_tensor<int64_t>({2}, {10, 1})},
                               {{"equation", Attribute::of_string("ij,j->i")}})[0];
  EXPECT_EQ(ints.to_i64_vector(), (std::vector<int64_t>{12, 34}));
  const Tensor empty = run_node("Einsum", {Tensor::zeros(DType::kF32, {2, 0}), Tensor::zeros(DType::kF32, {0, 3})},
                                {{"equation", Attribute::of_string("ij,jk->ik")}})[0];
  EXPECT_EQ(empty.dims(), (std::vector<int64_t>{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(empty.to_double(i), 0.0);
}

TEST(EinsumKernels, MalformedEquationsNameTheNode) {
  const Tensor x = testing::random_f64({2, 3}, 53);
  for (const char* eq : {"ij,jk->ik", "ijk->i", "ij->k", "i1->i", "ij->ii"}) {
    SCOPED_TRACE(eq);
    try {
      run_node("Einsum", {x}, {{"equation", Attribute::of_string(eq)}});
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Einsum"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(run_node("Einsum", {x, testing::random_f64({4, 3}, 54)}, {{"equation", Attribute::of_string("ij,jk")}}),
               ShapeError);  // j is 3 in one input and 4 in the other
}

}  // namespace
}  // namespace trainrt
