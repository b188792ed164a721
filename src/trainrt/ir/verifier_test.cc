#include "trainrt/ir/verifier.h"

#include <gtest/gtest.h>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

// x -> Relu -> Neg -> y, with an initializer feeding an Add.
struct Small {
  Graph g;
  Value* x;
  Node* relu;
  Node* neg;
  Node* add;
  Small() {
    g.name = "small";
    x = g.add_input("x", DType::kF32, Shape{{2}});
    Value* b = g.add_initializer("b", Tensor::zeros(DType::kF32, {2}));
    relu = g.add_node("Relu", {x}, {"r"}, kOnnxDomain, "relu");
    neg = g.add_node("Neg", {relu->output(0)}, {"n"}, kOnnxDomain, "neg");
    add = g.add_node("Add", {neg->output(0), b}, {"y"}, kOnnxDomain, "add");
    g.add_output(add->output(0));
  }
};

std::string problems_text(const Graph& g) {
  std::string out;
  for (const std::string& p : verify_problems(g)) out += p + "\n";
  return out;
}

void expect_problem(const Graph& g, std::string_view part) {
  std::string text = problems_text(g);
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
  EXPECT_THROW(verify(g), InvalidModel);
}

TEST(Verifier, ValidGraphPasses) {
  Small s;
  EXPECT_TRUE(verify_problems(s.g).empty()) << problems_text(s.g);
  EXPECT_NO_THROW(verify(s.g));
  // Omitted optional inputs and outputs are fine.
  s.g.add_node("Dropout", {s.x, nullptr}, {"d", ""}, kOnnxDomain, "drop");
  EXPECT_NO_THROW(verify(s.g));
}

TEST(Verifier, UndefinedInputNamesTheNode) {
  Small s;
  s.g.remove_node(s.relu);  // "r" loses its producer; Neg still reads it
  expect_problem(s.g, "node 'neg' (Neg): input 0 'r' is not defined");
  Small t;
  t.g.add_node("Abs", {t.g.add_value("dangling")}, {"a"}, kOnnxDomain, "abs");
  expect_problem(t.g, "node 'abs' (Abs): input 0 'dangling' is not defined");
}

TEST(Verifier, GraphOutputsMustBeDefined) {
  Small s;
  s.g.add_output(s.g.add_value("nothing"));
  expect_problem(s.g, "graph output 'nothing' is not defined");
  Small t;
  t.g.add_output(nullptr);
  expect_problem(t.g, "graph output #1 is null");
}

TEST(Verifier, Cycles) {
  Graph g;
  g.name = "loop";
  Value* a = g.add_value("a");
  Value* b = g.add_value("b");
  g.add_node_with_outputs("Relu", {a}, {b}, kOnnxDomain, "first");
  g.add_node_with_outputs("Neg", {b}, {a}, kOnnxDomain, "second");
  expect_problem(g, "cycle through node 'first' (Relu)");
}

TEST(Verifier, NamesAreUniqueAndNonEmpty) {
  Small s;
  s.g.add_node("Abs", {s.x}, {"abs_out"}, kOnnxDomain, "relu");
  expect_problem(s.g, "node name 'relu' is used by two nodes (Relu and Abs)");
  Small t;
  t.neg->set_name("");
  expect_problem(t.g, "a Neg node has an empty name");
  Small u;
  u.g.add_node("Abs", {u.x}, {""}, kOnnxDomain, "abs");  // "" is an omitted output, not a name
  EXPECT_NO_THROW(verify(u.g));
  Value* unnamed = u.g.add_value("");
  u.g.add_node("Abs", {unnamed}, {"abs2"}, kOnnxDomain, "abs2");
  expect_problem(u.g, "has an empty name");
}

TEST(Verifier, ProducerAndUseLinks) {
  Small s;
  // A graph input that a node also produces.
  s.g.add_node_with_outputs("Abs", {s.relu->output(0)}, {s.x}, kOnnxDomain, "abs");
  expect_problem(s.g, "graph input 'x' is also produced by node 'abs' (Abs)");
  Small t;
  t.g.mutable_inputs().push_back(t.x);
  expect_problem(t.g, "graph input 'x' is listed twice");
  Small u;
  u.x->uses.push_back({u.neg, 0});  // Neg's input 0 is "r", not "x"
  expect_problem(u.g,
                 "value 'x' lists a use as input 0 of node 'neg' (Neg), which reads something else there");
  Small dup;
  dup.x->uses.push_back(dup.x->uses[0]);
  expect_problem(dup.g, "value 'x' lists its use as input 0 of node 'relu' (Relu) twice");
  Small v;
  v.relu->output(0)->uses.clear();
  expect_problem(v.g, "node 'neg' (Neg): input 0 'r' does not list this node as a use");
  Small w;
  w.relu->output(0)->producer = w.add;
  expect_problem(w.g, "node 'relu' (Relu): output 0 'r' is recorded as produced by node 'add' (Add)");
}

TEST(Verifier, ValuesFromAnotherGraph) {
  Small s;
  Small other;
  s.g.add_node("Abs", {other.x}, {"a"}, kOnnxDomain, "abs");
  expect_problem(s.g, "value 'x' is not the value of that name in this graph");
}

TEST(Verifier, ProblemsAreCapped) {
  Graph g;
  for (int i = 0; i < 30; ++i)
    g.add_node("Abs", {g.add_value(fmt("v", i))}, {fmt("o", i)});
  std::vector<std::string> problems = verify_problems(g);
  ASSERT_EQ(problems.size(), kMaxVerifierProblems + 1);
  EXPECT_EQ(problems.back(), "(10 more problems not shown)");
}

}  // namespace
}  // namespace trainrt
