// Graph::topological_order: a valid schedule whatever the insertion order, and the insertion order
// itself whenever that is already one (the order torch.export and the gradient builder intend).
#include "trainrt/ir/graph.h"

#include <gtest/gtest.h>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

std::vector<std::string> names(const std::vector<Node*>& order) {
  std::vector<std::string> out;
  for (const Node* n : order) out.push_back(n->name());
  return out;
}

// a = A(x); b = B(a); w = W(a); d = D(b): W is a side branch inserted before the chain goes on, like
// a layer's weight-gradient GEMM next to its input gradient. Depth-first would run A B D W and keep
// `a` live to the end; the insertion order runs W as soon as it was meant to, and `a` dies there.
TEST(GraphTopologicalOrder, KeepsAnInsertionOrderThatIsAlreadyASchedule) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape{{4}});
  Value* a = g.add_node("Relu", {x}, {"a"}, kOnnxDomain, "A")->output(0);
  Value* b = g.add_node("Neg", {a}, {"b"}, kOnnxDomain, "B")->output(0);
  Value* w = g.add_node("ReduceSum", {a}, {"w"}, kOnnxDomain, "W")->output(0);
  Value* d = g.add_node("Neg", {b}, {"d"}, kOnnxDomain, "D")->output(0);
  g.add_output(d);
  g.add_output(w);
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"A", "B", "W", "D"}));
}

// Nodes inserted before their producers come after them; otherwise the earliest inserted goes first.
TEST(GraphTopologicalOrder, MovesANodeAfterItsProducer) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape{{4}});
  Value* late = g.add_value("late");
  Node* reader = g.add_node("Neg", {late}, {"y"}, kOnnxDomain, "reader");
  g.add_node("Relu", {x}, {"other"}, kOnnxDomain, "independent");
  g.add_node_with_outputs("Relu", {x}, {late}, kOnnxDomain, "producer");
  g.add_output(reader->output(0));
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"independent", "producer", "reader"}));
}

TEST(GraphTopologicalOrder, NamesANodeOnACycle) {
  Graph g;
  Value* loop = g.add_value("loop");
  Node* n = g.add_node_with_outputs("Neg", {loop}, {loop}, kOnnxDomain, "self");
  g.add_output(n->output(0));
  try {
    g.topological_order();
    FAIL() << "a cycle was accepted";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("self"), std::string::npos) << e.what();
  }
}

// A node added last but moved before its reader's sibling runs there, not at the end.
TEST(GraphTopologicalOrder, FollowsMoveBefore) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, Shape{{4}});
  Value* a = g.add_node("Relu", {x}, {"a"}, kOnnxDomain, "A")->output(0);
  Node* b = g.add_node("Neg", {a}, {"b"}, kOnnxDomain, "B");
  Node* c = g.add_node("Neg", {x}, {"c"}, kOnnxDomain, "C");
  Node* late = g.add_node("Relu", {x}, {"r"}, kOnnxDomain, "late");
  g.move_before(late, b);
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"A", "late", "B", "C"}));
  g.move_before(late, c);  // forward again: just before C
  EXPECT_EQ(names(g.topological_order()), (std::vector<std::string>{"A", "B", "late", "C"}));
  EXPECT_EQ(names(g.nodes()), names(g.topological_order()));
}

}  // namespace
}  // namespace trainrt
